// The Java KafkaConsumer's metric names after a short group session, for comparing kclient's
// metrics() with Java's on the same broker.
//
// Arguments: bootstrap topic groupId records, then key=value consumer settings.
// Joins the group, reads `records` records, commits once, then prints one line per metric:
//   M <group> <tag keys, comma-separated, client-id left out, "-" if none> <name>
// and finally DONE. Exits non-zero if the records did not arrive within 60 s.
import java.io.PrintStream;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeSet;

import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class JavaConsumerMetricNames {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("group.id", args[2]);
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        props.put("auto.offset.reset", "earliest");
        props.put("enable.auto.commit", "false");
        for (int i = 4; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            props.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        int want = Integer.parseInt(args[3]);
        PrintStream out = new PrintStream(System.out, true, "UTF-8");
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(Collections.singletonList(args[1]));
            long deadline = System.currentTimeMillis() + 60_000;
            int got = 0;
            while (got < want && System.currentTimeMillis() < deadline) {
                got += consumer.poll(Duration.ofMillis(200)).count();
            }
            if (got < want) {
                out.println("E only " + got + " of " + want + " records");
                System.exit(2);
            }
            consumer.commitSync();
            TreeSet<String> lines = new TreeSet<>();
            for (Map.Entry<MetricName, ? extends Metric> e : consumer.metrics().entrySet()) {
                MetricName n = e.getKey();
                List<String> keys = new ArrayList<>(new TreeSet<>(n.tags().keySet()));
                keys.remove("client-id");
                lines.add("M " + n.group() + " " + (keys.isEmpty() ? "-" : String.join(",", keys)) + " " + n.name());
            }
            for (String line : lines) {
                out.println(line);
            }
        }
        out.println("DONE");
    }
}
