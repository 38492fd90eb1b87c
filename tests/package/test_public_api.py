"""What users import from ``kclient`` resolves, and unknown names fail like a module's do."""
import pytest

import kclient


@pytest.mark.parametrize("name", kclient.__all__)
def test_public_name_resolves(name):
    obj = getattr(kclient, name)
    assert obj.__name__ == name


def test_unknown_name_raises_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'NoSuchThing'"):
        kclient.NoSuchThing  # noqa: B018


def test_kafka_python_import_line_works():
    from kclient import ConsumerRecord, KafkaConsumer, OffsetAndMetadata, TopicPartition  # noqa: F401
    assert TopicPartition("t", 1) == ("t", 1)
