// The Java KafkaConsumer in the end-to-end latency benchmark, driven by bench/latency.py.
//
// Arguments: bootstrap topic partitions records then key=value consumer settings.
// It assigns every partition at its end, prints READY once every position is known, then
// polls until `records` records arrived (or input on stdin, or nothing for 30 s). Each value's
// first 8 bytes (big-endian) are the producer's wall clock at send, in nanoseconds since the
// epoch; the record's timestamp is the broker's append time (the topic has LogAppendTime). At
// the end it prints "C" and the CPU time the process used since READY (us), then, in arrival
// order and space-separated: "S" and the send times (us), "T" and the append times (ms), "A"
// and the arrival times (us, wall clock), then "END".
import java.io.PrintStream;
import java.lang.management.ManagementFactory;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class JavaLatency {
    private static long nowNanos() {
        Instant t = Instant.now();
        return t.getEpochSecond() * 1_000_000_000L + t.getNano();
    }

    private static long processCpuNanos() {
        return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
            .getProcessCpuTime();
    }

    private static void printLine(PrintStream out, String kind, long[] values, int n) {
        StringBuilder line = new StringBuilder(kind);
        for (int i = 0; i < n; i++) {
            line.append(' ').append(values[i]);
        }
        out.println(line);
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        int partitions = Integer.parseInt(args[2]);
        int records = Integer.parseInt(args[3]);
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        props.put("enable.auto.commit", "false");
        for (int i = 4; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            props.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        PrintStream out = new PrintStream(System.out, false, "UTF-8");
        long cpuAtReady = 0;
        long[] sent = new long[records];
        long[] appended = new long[records];
        long[] arrived = new long[records];
        int n = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            List<TopicPartition> tps = new ArrayList<>();
            for (int p = 0; p < partitions; p++) {
                tps.add(new TopicPartition(topic, p));
            }
            consumer.assign(tps);
            consumer.seekToEnd(tps);
            for (TopicPartition tp : tps) {
                consumer.position(tp);
            }
            cpuAtReady = processCpuNanos();
            out.println("READY");
            out.flush();
            long idleSince = System.nanoTime();
            while (n < records) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(100))) {
                    long now = nowNanos();
                    if (n < records) {
                        arrived[n] = now / 1000;
                        sent[n] = ByteBuffer.wrap(r.value(), 0, 8).getLong() / 1000;
                        appended[n] = r.timestamp();
                        n++;
                    }
                    idleSince = System.nanoTime();
                }
                if (System.in.available() > 0 || System.nanoTime() - idleSince > 30_000_000_000L) {
                    break;  // the driver asked to stop, or nothing for 30 s
                }
            }
        }
        out.println("C " + (processCpuNanos() - cpuAtReady) / 1000);
        printLine(out, "S", sent, n);
        printLine(out, "T", appended, n);
        printLine(out, "A", arrived, n);
        out.println("END");
        out.flush();
    }
}
