package etcdcluster

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
)

// ReasonMemberUnschedulable: a member's Pod stays Pending because the
// scheduler finds no node for it. The message quotes the scheduler and
// names the Pod's placement rules, so a strict spread on too few zones is
// never left to be guessed.
const ReasonMemberUnschedulable = "MemberUnschedulable"

// placement is where each member Pod was scheduled, as the Pods say: the
// node, and the zone label the API server copies from the Node at binding.
func (p *planner) placement() []v1beta2.MemberPlacement {
	var out []v1beta2.MemberPlacement
	for name, pod := range p.o.Pods {
		if pod.Spec.NodeName == "" {
			continue
		}
		out = append(out, v1beta2.MemberPlacement{Name: name, Node: pod.Spec.NodeName, Zone: pod.Labels[v1beta2.LabelTopologyZone]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// unschedulableMembers reports every member Pod the scheduler left
// Pending, whatever the phase (a new cluster whose members cannot be
// placed would otherwise only say it is bootstrapping), and returns the
// unready members it did not report. Members held for the same reason
// under the same rules are named together.
func (p *planner) unschedulableMembers(r *observation, unready []string) []string {
	var names []string
	for name, pod := range p.o.Pods {
		if pod.DeletionTimestamp == nil && unschedulable(pod) != "" {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return unready
	}
	sort.Strings(names)
	var order []string
	byWhy := map[string][]string{}
	for _, name := range names {
		why := p.unschedulableWhy(p.o.Pods[name])
		if _, seen := byWhy[why]; !seen {
			order = append(order, why)
		}
		byWhy[why] = append(byWhy[why], name)
	}
	for _, why := range order {
		who := "member " + byWhy[why][0] + " is"
		if len(byWhy[why]) > 1 {
			who = "members " + strings.Join(byWhy[why], ", ") + " are"
		}
		r.problem(ReasonMemberUnschedulable, who+" Pending, and the scheduler says: "+why)
	}
	rest := make([]string, 0, len(unready))
	for _, name := range unready {
		if !slices.Contains(names, name) {
			rest = append(rest, name)
		}
	}
	return rest
}

// unschedulableWhy is the scheduler's message, with the Pod's placement
// rules that could explain it.
func (p *planner) unschedulableWhy(pod *corev1.Pod) string {
	var b strings.Builder
	b.WriteString(strings.TrimRight(strings.TrimPrefix(unschedulable(pod), "Unschedulable: "), ". "))
	if rules := spreadRules(pod.Spec.TopologySpreadConstraints); rules != "" {
		fmt.Fprintf(&b, ". Its Pod's topologySpreadConstraints: %s", rules)
	}
	if a := pod.Spec.Affinity; a != nil && a.PodAntiAffinity != nil && len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0 {
		b.WriteString(". Its Pod requires one member per node (spec.pod.antiAffinity or spec.pod.affinity)")
	}
	pol := p.spec.Pod
	if pol.DefaultPlacement() && pol.SpreadOrDefault() == v1beta2.SpreadStrict && len(pod.Spec.TopologySpreadConstraints) > 0 &&
		pod.Spec.TopologySpreadConstraints[0].WhenUnsatisfiable == corev1.DoNotSchedule {
		b.WriteString(". spec.pod.spread: strict places no member where it would leave a zone or node two members ahead of another, " +
			"nor on a node without those labels: add zones or nodes, or set spread: preferred")
	}
	return b.String()
}

// spreadRules describes topology spread constraints in one line.
func spreadRules(cs []corev1.TopologySpreadConstraint) string {
	parts := make([]string, 0, len(cs))
	for _, c := range cs {
		parts = append(parts, fmt.Sprintf("maxSkew %d over %s (%s)", c.MaxSkew, c.TopologyKey, c.WhenUnsatisfiable))
	}
	return strings.Join(parts, ", ")
}
