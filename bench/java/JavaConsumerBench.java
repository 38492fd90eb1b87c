// The Java KafkaConsumer as a benchmark peer, driven by bench/drivers/java_consumer.py.
//
// Protocol on stdin/stdout, one line each:
//   -> READY                       the JVM is up and the client classes are loaded
//   <- GO                          the driver opened its measurement window: build the consumer
//   -> B <records> <valueBytes>    one poll's records (only polls that returned some)
//   -> X <message>                 invalid data; the run is invalid
//   -> E <exception>               the client failed; the run is invalid
//   <- STOP                        the driver has what it needs: close and exit
// End of input (the driver died or gave up) halts the JVM at once: it must not outlive the run.
// Arguments: bootstrap topic partitions records mode(assign|group) groupId sessionTimeoutMs
//            then key=value consumer settings (groupId and sessionTimeoutMs: group mode only).
// The last record of every batch is spot-checked like the Python drivers do: the value's
// first 8 bytes (big-endian) must be offset * partitions + partition.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class JavaConsumerBench {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        int partitions = Integer.parseInt(args[2]);
        long records = Long.parseLong(args[3]);
        boolean group = args[4].equals("group");
        String groupId = args[5];
        String sessionTimeoutMs = args[6];

        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        props.put("enable.auto.commit", "false");
        props.put("auto.offset.reset", "earliest");
        if (group) {
            props.put("group.id", groupId);
            props.put("session.timeout.ms", sessionTimeoutMs);
        }
        for (int i = 7; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            props.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }

        PrintStream out = new PrintStream(System.out, false, "UTF-8");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, "UTF-8"));
        // Load the client's classes before the window opens, as the Python drivers import theirs.
        Class.forName(KafkaConsumer.class.getName());
        out.println("READY");
        out.flush();
        if (!"GO".equals(in.readLine())) {
            return;
        }

        CountDownLatch stop = new CountDownLatch(1);
        Thread watchdog = new Thread(() -> {
            try {
                while (true) {
                    String line = in.readLine();
                    if (line == null) {
                        Runtime.getRuntime().halt(2);
                    }
                    if (line.equals("STOP")) {
                        stop.countDown();
                    }
                }
            } catch (Exception e) {
                Runtime.getRuntime().halt(2);
            }
        }, "stdin-watchdog");
        watchdog.setDaemon(true);
        watchdog.start();
        try {
            run(props, topic, partitions, group ? 1 : records, group, out, stop);
        } catch (Exception e) {
            out.println("E " + e.toString().replace('\n', ' '));
            out.flush();
            System.exit(1);
        }
    }

    private static void run(Properties props, String topic, int partitions, long target, boolean group,
                            PrintStream out, CountDownLatch stop) throws Exception {
        long count = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            if (group) {
                consumer.subscribe(Collections.singletonList(topic));
            } else {
                List<TopicPartition> tps = new ArrayList<>();
                for (int p = 0; p < partitions; p++) {
                    tps.add(new TopicPartition(topic, p));
                }
                consumer.assign(tps);
                consumer.seekToBeginning(tps);
            }
            while (count < target) {
                ConsumerRecords<byte[], byte[]> batch = consumer.poll(Duration.ofMillis(100));
                if (batch.isEmpty()) {
                    continue;
                }
                long bytes = 0;
                for (TopicPartition tp : batch.partitions()) {
                    List<ConsumerRecord<byte[], byte[]>> part = batch.records(tp);
                    for (ConsumerRecord<byte[], byte[]> r : part) {
                        bytes += r.value() == null ? 0 : r.value().length;
                    }
                    ConsumerRecord<byte[], byte[]> last = part.get(part.size() - 1);
                    String bad = check(last, partitions);
                    if (bad != null) {
                        out.println("X " + bad);
                        out.flush();
                        return;
                    }
                }
                count += batch.count();
                out.println("B " + batch.count() + " " + bytes);
                out.flush();
            }
            stop.await();  // close outside the window
        }
    }

    private static String check(ConsumerRecord<byte[], byte[]> r, int partitions) {
        byte[] v = r.value();
        if (v == null || v.length < 8) {
            return "partition " + r.partition() + " offset " + r.offset() + ": no sequence number";
        }
        long seq = ByteBuffer.wrap(v, 0, 8).getLong();
        long want = r.offset() * partitions + r.partition();
        return seq == want ? null
            : "partition " + r.partition() + " offset " + r.offset() + ": sequence " + seq + ", expected " + want;
    }
}
