// The Java KafkaConsumer as one group member of the rebalance benchmark (bench/rebalance.py).
//
// Protocol on stdin/stdout, one line each (the same as bench/rebalance_member.py):
//   -> READY          the JVM is up and the client classes are loaded
//   <- GO             subscribe and poll
//   -> S <owned> <unread>  after every assignment change: partitions owned, and not yet read from
//   -> R <partition> <unread>  the first record of a partition since it was (re)assigned
//   <- STOP           close the consumer (leaving the group), print CLOSED and exit
//   -> E <exception>  the client failed
// End of input halts the JVM at once: it must not outlive the run.
// Arguments: bootstrap topic groupId then key=value consumer settings.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.time.Duration;
import java.util.Collection;
import java.util.Collections;
import java.util.HashSet;
import java.util.Properties;
import java.util.Set;

import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class JavaRebalanceMember {
    private static volatile boolean stop = false;

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("group.id", args[2]);
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        props.put("auto.offset.reset", "earliest");
        props.put("enable.auto.commit", "false");
        for (int i = 3; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            props.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        PrintStream out = new PrintStream(System.out, true, "UTF-8");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, "UTF-8"));
        KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props);
        out.println("READY");
        if (!"GO".equals(in.readLine())) {
            Runtime.getRuntime().halt(0);
        }
        Thread reader = new Thread(() -> {
            try {
                String line = in.readLine();
                if (line == null) {
                    Runtime.getRuntime().halt(0);
                }
                stop = true;
                consumer.wakeup();
            } catch (Exception e) {
                Runtime.getRuntime().halt(0);
            }
        });
        reader.setDaemon(true);
        reader.start();
        Set<Integer> fresh = new HashSet<>();
        Set<Integer> owned = new HashSet<>();
        try {
            consumer.subscribe(Collections.singletonList(args[1]), new ConsumerRebalanceListener() {
                public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                    for (TopicPartition tp : parts) {
                        fresh.remove(tp.partition());
                        owned.remove(tp.partition());
                    }
                    out.println("S " + owned.size() + " " + fresh.size());
                }

                public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                    for (TopicPartition tp : parts) {
                        fresh.add(tp.partition());
                        owned.add(tp.partition());
                    }
                    out.println("S " + owned.size() + " " + fresh.size());
                }

                public void onPartitionsLost(Collection<TopicPartition> parts) {
                    onPartitionsRevoked(parts);
                }
            });
            while (!stop) {
                ConsumerRecords<byte[], byte[]> records;
                try {
                    records = consumer.poll(Duration.ofMillis(100));
                } catch (org.apache.kafka.common.errors.WakeupException e) {
                    break;
                }
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    if (fresh.remove(r.partition())) {
                        out.println("R " + r.partition() + " " + fresh.size());
                    }
                }
            }
            consumer.close();
            out.println("CLOSED");
        } catch (Exception e) {
            out.println("E " + e.toString().replace('\n', ' '));
        }
        Runtime.getRuntime().halt(0);
    }
}
