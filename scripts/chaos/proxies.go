package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/collectors"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// proxied is one role whose every broker connection goes through
// toxiproxy (in this process): the cluster's VIAk listener advertises, for
// each node, a port where a proxy of this set listens (scripts/kafka/kafka,
// cluster.properties), so the role, bootstrapped from those ports, reaches
// every broker only through them. A toxic on the set delays or cuts that
// one role's produce, EndTxn, fetch and heartbeat requests and nothing
// else's.
type proxied struct {
	role    string // the role's name
	brokers string // its --brokers: the proxies' ports
	proxies []*toxiproxy.Proxy
}

// startProxies starts one set of three proxies per role named, the k-th
// (from 1) on the cluster's VIAk listener: node N's VIAk listens on
// base+20+10(k-1)+N and advertises base+50+10(k-1)+N.
func startProxies(base int, roles []string) (map[string]*proxied, func(), error) {
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	srv.Metrics.ProxyMetrics = collectors.NewProxyMetricCollectors()
	out := map[string]*proxied{}
	var all []*toxiproxy.Proxy
	stop := func() {
		for _, p := range all {
			p.Stop()
		}
	}
	for k, name := range roles {
		if k >= 3 {
			return nil, stop, fmt.Errorf("the cluster has three VIA listeners; %d roles asked for proxies", len(roles))
		}
		set := &proxied{role: name}
		var addrs []string
		for node := 1; node <= 3; node++ {
			listen := fmt.Sprintf("127.0.0.1:%d", base+50+10*k+node)
			upstream := fmt.Sprintf("127.0.0.1:%d", base+20+10*k+node)
			p := toxiproxy.NewProxy(srv, fmt.Sprintf("%s-node%d", name, node), listen, upstream)
			// The advertised ports are in Linux's ephemeral range (as
			// the cluster's own): an outgoing connection can hold one
			// for a while. Try again for up to a minute.
			var err error
			for try := 0; try < 60; try++ {
				if err = p.Start(); err == nil {
					break
				}
				time.Sleep(time.Second)
			}
			if err != nil {
				stop()
				return nil, stop, fmt.Errorf("proxy %s -> %s for %s: %w", listen, upstream, name, err)
			}
			all = append(all, p)
			set.proxies = append(set.proxies, p)
			addrs = append(addrs, listen)
		}
		set.brokers = strings.Join(addrs, ",")
		out[name] = set
	}
	return out, stop, nil
}

// add puts a toxic (toxiproxy's JSON, without its name) on both streams
// of every proxy of the set.
func (s *proxied) add(toxic string) error {
	for _, p := range s.proxies {
		for _, stream := range []string{"upstream", "downstream"} {
			js := fmt.Sprintf(`{"name":"fault-%s",%s,"stream":%q}`, stream, toxic, stream)
			if _, err := p.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
				return fmt.Errorf("toxic on %s: %w", p.Name, err)
			}
		}
	}
	return nil
}

// clear removes the toxics add put.
func (s *proxied) clear() {
	for _, p := range s.proxies {
		for _, stream := range []string{"upstream", "downstream"} {
			_ = p.Toxics.RemoveToxic(context.Background(), "fault-"+stream)
		}
	}
}
