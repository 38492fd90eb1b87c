# The public names for type checkers. At run time kclient/__init__.py imports them lazily, on
# first use, so that `import kclient` stays cheap; tests/test_public_stubs.py keeps the two
# in agreement.
from kclient.admin import KafkaAdminClient as KafkaAdminClient
from kclient.admin import NewPartitions as NewPartitions
from kclient.admin import NewTopic as NewTopic
from kclient.admin import OffsetSpec as OffsetSpec
from kclient.consumer.columnar import ColumnarRecords as ColumnarRecords
from kclient.consumer.deserializers import DefaultSerializer as DefaultSerializer
from kclient.consumer.deserializers import Deserializer as Deserializer
from kclient.consumer.deserializers import JsonSerializer as JsonSerializer
from kclient.consumer.deserializers import Serializer as Serializer
from kclient.consumer.interceptors import ConsumerInterceptor as ConsumerInterceptor
from kclient.consumer.kafka_consumer import IsolationLevel as IsolationLevel
from kclient.consumer.kafka_consumer import KafkaConsumer as KafkaConsumer
from kclient.subscription.listener import ConsumerRebalanceListener as ConsumerRebalanceListener
from kclient.producer import KafkaProducer as KafkaProducer
from kclient.producer import RecordMetadata as RecordMetadata
from kclient.share.acknowledgements import AcknowledgeType as AcknowledgeType
from kclient.share.columnar import ShareColumnarRecords as ShareColumnarRecords
from kclient.share.consumer import KafkaShareConsumer as KafkaShareConsumer
from kclient.structs import ConsumerRecord as ConsumerRecord
from kclient.structs import OffsetAndMetadata as OffsetAndMetadata
from kclient.structs import OffsetAndTimestamp as OffsetAndTimestamp
from kclient.structs import TopicPartition as TopicPartition

__version__: str

__all__ = [
    "AcknowledgeType",
    "ColumnarRecords",
    "ConsumerInterceptor",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "DefaultSerializer",
    "Deserializer",
    "IsolationLevel",
    "JsonSerializer",
    "KafkaAdminClient",
    "KafkaConsumer",
    "KafkaProducer",
    "KafkaShareConsumer",
    "NewPartitions",
    "NewTopic",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "OffsetSpec",
    "RecordMetadata",
    "Serializer",
    "ShareColumnarRecords",
    "TopicPartition",
]
