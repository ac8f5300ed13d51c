// BrokerCounts prints, as one JSON object, a Kafka broker's request counts
// by API (kafka.network RequestMetrics RequestsPerSec, summed over
// versions: every request the broker served, the inter-broker
// WriteTxnMarkers included) and the records appended per topic
// (BrokerTopicMetrics MessagesInPerSec), read once over JMX. scripts/bench-api
// runs it (java BrokerCounts.java HOST:PORT) before and after a measured run
// when HERALD_KAFKA_JMX_PORT names the broker's JMX port: counts, unlike CPU
// time, are what a loaded machine does not distort. Java 17, no jars.
import java.util.Map;
import java.util.TreeMap;
import javax.management.MBeanServerConnection;
import javax.management.ObjectName;
import javax.management.remote.JMXConnector;
import javax.management.remote.JMXConnectorFactory;
import javax.management.remote.JMXServiceURL;

public class BrokerCounts {
    public static void main(String[] args) throws Exception {
        JMXServiceURL url = new JMXServiceURL("service:jmx:rmi:///jndi/rmi://" + args[0] + "/jmxrmi");
        try (JMXConnector c = JMXConnectorFactory.connect(url)) {
            MBeanServerConnection s = c.getMBeanServerConnection();
            Map<String, Long> req = new TreeMap<>(), rec = new TreeMap<>();
            for (ObjectName n : s.queryNames(new ObjectName("kafka.network:type=RequestMetrics,name=RequestsPerSec,*"), null)) {
                req.merge(n.getKeyProperty("request"), ((Number) s.getAttribute(n, "Count")).longValue(), Long::sum);
            }
            for (ObjectName n : s.queryNames(new ObjectName("kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec,topic=*"), null)) {
                rec.merge(n.getKeyProperty("topic"), ((Number) s.getAttribute(n, "Count")).longValue(), Long::sum);
            }
            StringBuilder b = new StringBuilder("{\"requests\": {");
            append(b, req);
            b.append("}, \"records_in\": {");
            append(b, rec);
            System.out.println(b.append("}}"));
        }
    }

    static void append(StringBuilder b, Map<String, Long> m) {
        String sep = "";
        for (Map.Entry<String, Long> e : m.entrySet()) {
            b.append(sep).append('"').append(e.getKey()).append("\": ").append(e.getValue());
            sep = ", ";
        }
    }
}
