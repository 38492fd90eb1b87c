// A broker-side metrics reporter that records the client metrics clients push (KIP-714), for
// tests: put on the broker's classpath and named in `metric.reporters`, it makes the broker
// offer GetTelemetrySubscriptions and PushTelemetry, and appends one line per push to the file
// named by the broker setting `kclient.telemetry.record.file`:
//   <client instance id> <terminating: true|false> <content type> <payload, base64>
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.List;
import java.util.Map;

import org.apache.kafka.common.metrics.KafkaMetric;
import org.apache.kafka.common.metrics.MetricsReporter;
import org.apache.kafka.server.authorizer.AuthorizableRequestContext;
import org.apache.kafka.server.telemetry.ClientTelemetry;
import org.apache.kafka.server.telemetry.ClientTelemetryPayload;
import org.apache.kafka.server.telemetry.ClientTelemetryReceiver;

@SuppressWarnings("deprecation")
public final class TelemetryRecorder implements MetricsReporter, ClientTelemetry, ClientTelemetryReceiver {
    public static final String FILE = "kclient.telemetry.record.file";
    private volatile String path;

    @Override
    public void configure(Map<String, ?> configs) {
        Object file = configs.get(FILE);
        path = file == null ? null : file.toString();
    }

    @Override
    public void init(List<KafkaMetric> metrics) {
    }

    @Override
    public void metricChange(KafkaMetric metric) {
    }

    @Override
    public void metricRemoval(KafkaMetric metric) {
    }

    @Override
    public void close() {
    }

    @Override
    public ClientTelemetryReceiver clientReceiver() {
        return this;
    }

    @Override
    public void exportMetrics(AuthorizableRequestContext context, ClientTelemetryPayload payload) {
        if (path == null) {
            return;
        }
        ByteBuffer data = payload.data().duplicate();
        byte[] bytes = new byte[data.remaining()];
        data.get(bytes);
        String line = payload.clientInstanceId() + " " + payload.isTerminating() + " " + payload.contentType() + " "
                + Base64.getEncoder().encodeToString(bytes) + "\n";
        synchronized (TelemetryRecorder.class) {
            try (OutputStream out = new FileOutputStream(path, true)) {
                out.write(line.getBytes(StandardCharsets.UTF_8));
            } catch (IOException e) {
                throw new RuntimeException(e);
            }
        }
    }
}
