package main

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/etcdhook/etcd-hook/membership"
)

type metrics struct {
	latency *prometheus.HistogramVec
	errors  *prometheus.CounterVec
	actions *prometheus.CounterVec
	// objects are the per-object series (clustermetrics.go).
	objects *objectMetrics
	// routing counts syncs by what became of them with --peers; peers
	// reports the replicas last resolved.
	routing *prometheus.CounterVec
	peers   func() float64
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "etcd_hook_request_duration_seconds",
			Help: "Time to answer a request, by route and HTTP status code.",
			// From sub-millisecond steady syncs up to Metacontroller's 10 s
			// hook timeout.
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"route", "code"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "etcd_hook_request_errors_total",
			Help: "Requests answered with an error status, by route and code.",
		}, []string{"route", "code"}),
		actions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "etcd_hook_membership_actions_total",
			Help: "Membership changes attempted, by action and result.",
		}, []string{"action", "result"}),
	}
	m.routing = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "etcd_hook_sync_routing_total",
		Help: "Sync and finalize requests with --peers, by outcome: owned (answered here, its owner), received (forwarded here by a replica), forwarded (answered by its owner), fallback (the owner unreachable before the request was sent; answered here), failed (sent to the owner, no answer: 502).",
	}, []string{"outcome"})
	peers := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "etcd_hook_peers",
		Help: "Replicas --peers last resolved to, this one included; 0 without --peers.",
	}, func() float64 {
		if m.peers == nil {
			return 0
		}
		return m.peers()
	})
	m.objects = newObjectMetrics(time.Now)
	reg.MustRegister(m.latency, m.errors, m.actions, m.objects, m.routing, peers,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) observeRequest(route string, code int, d time.Duration) {
	c := strconv.Itoa(code)
	m.latency.WithLabelValues(route, c).Observe(d.Seconds())
	if code >= 400 {
		m.errors.WithLabelValues(route, c).Inc()
	}
}

// MembershipAction implements reconcile.Recorder.
func (m *metrics) MembershipAction(action membership.ActionType, result string) {
	m.actions.WithLabelValues(string(action), result).Inc()
}
