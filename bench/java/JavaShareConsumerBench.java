// The Java KafkaShareConsumer as a benchmark peer, driven by bench/share.py (one JVM per member).
//
// Protocol on stdin/stdout, one line each:
//   -> READY                       the JVM is up and the client classes are loaded
//   <- GO                          the measurement window is open: build the consumer
//   -> B <records>                 one poll's records (only polls that returned some)
//   -> X <message>                 invalid data; the run is invalid
//   -> E <exception>               the client failed; the run is invalid
//   <- STOP                        the run has what it needs: close and exit
// End of input (the runner died or gave up) halts the JVM at once: it must not outlive the run.
// Arguments: bootstrap topic partitions groupId, then key=value share consumer settings.
// Implicit acknowledgement (the default): each poll accepts the previous poll's records.
// The last record of every partition's batch is spot-checked: the value's first 8 bytes
// (big-endian) must be offset * partitions + partition.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.Collections;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class JavaShareConsumerBench {
    private static volatile boolean stopped = false;

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        int partitions = Integer.parseInt(args[2]);
        String groupId = args[3];

        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("group.id", groupId);
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        for (int i = 4; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            props.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }

        PrintStream out = new PrintStream(System.out, false, "UTF-8");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, "UTF-8"));
        Class.forName(KafkaShareConsumer.class.getName());
        out.println("READY");
        out.flush();
        if (!"GO".equals(in.readLine())) {
            return;
        }
        Thread watchdog = new Thread(() -> {
            try {
                while (true) {
                    String line = in.readLine();
                    if (line == null) {
                        Runtime.getRuntime().halt(2);
                    }
                    if (line.equals("STOP")) {
                        stopped = true;
                    }
                }
            } catch (Exception e) {
                Runtime.getRuntime().halt(2);
            }
        }, "stdin-watchdog");
        watchdog.setDaemon(true);
        watchdog.start();
        try (KafkaShareConsumer<byte[], byte[]> consumer = new KafkaShareConsumer<>(props)) {
            consumer.subscribe(Collections.singletonList(topic));
            while (!stopped) {
                ConsumerRecords<byte[], byte[]> batch = consumer.poll(Duration.ofMillis(100));
                if (batch.isEmpty()) {
                    continue;
                }
                Map<Integer, ConsumerRecord<byte[], byte[]>> last = new HashMap<>();
                for (ConsumerRecord<byte[], byte[]> r : batch) {
                    last.put(r.partition(), r);
                }
                for (ConsumerRecord<byte[], byte[]> r : last.values()) {
                    String bad = check(r, partitions);
                    if (bad != null) {
                        out.println("X " + bad);
                        out.flush();
                        return;
                    }
                }
                out.println("B " + batch.count());
                out.flush();
            }
        } catch (Exception e) {
            out.println("E " + e.toString().replace('\n', ' '));
            out.flush();
            System.exit(1);
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
