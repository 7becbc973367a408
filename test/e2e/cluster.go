package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	corev1 "k8s.io/api/core/v1"

	"github.com/etcdhook/etcd-hook/test/e2e/harness"
)

// Cluster is one EtcdCluster in a harness Env, seen from the outside: through
// the API server's objects, the parent's status and etcd's own answers. It
// deliberately does not import the hook's packages: the scenarios check the
// wire contract and etcd, not the hook's idea of them.
type Cluster struct {
	Env       *harness.Env
	Namespace string
	Name      string
}

// Pod is the part of a member Pod the scenarios look at.
type Pod struct {
	Name        string
	UID         string
	IP          string
	Ready       bool
	Terminating bool
	Restarts    int32
}

// RestoredPods are the member Pods that restore a backup themselves
// (the restore's init containers), by name.
func (c *Cluster) RestoredPods() []string {
	var out []string
	for _, obj := range c.Env.API.List(harness.TypePod, c.Namespace) {
		md, _ := obj["metadata"].(map[string]any)
		labels, _ := md["labels"].(map[string]any)
		annotations, _ := md["annotations"].(map[string]any)
		if labels["etcd_cluster"] != c.Name || md["deletionTimestamp"] != nil {
			continue
		}
		if _, ok := annotations["etcd.database.coreos.com/restore-request"]; ok {
			name, _ := md["name"].(string)
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// Pods lists the cluster's member Pods by name, terminating ones included:
// a Pod on its way out still runs an etcd that may still be a member.
func (c *Cluster) Pods() []Pod {
	var out []Pod
	for _, obj := range c.Env.API.List(harness.TypePod, c.Namespace) {
		var p corev1.Pod
		data, err := json.Marshal(obj)
		if err != nil || json.Unmarshal(data, &p) != nil {
			continue
		}
		if p.Labels["etcd_cluster"] != c.Name {
			continue
		}
		pod := Pod{Name: p.Name, UID: string(p.UID), IP: p.Status.PodIP, Ready: harness.IsPodReady(obj), Terminating: p.DeletionTimestamp != nil}
		for _, cs := range p.Status.ContainerStatuses {
			pod.Restarts += cs.RestartCount
		}
		out = append(out, pod)
	}
	slices.SortFunc(out, func(a, b Pod) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// PodNames returns the sorted names of the cluster's Pods.
func (c *Cluster) PodNames() []string {
	var names []string
	for _, p := range c.Pods() {
		names = append(names, p.Name)
	}
	return names
}

// MemberURL is a member's client URL by its stable DNS name, the way the
// hook and other members reach it.
func (c *Cluster) MemberURL(member string) string {
	return fmt.Sprintf("%s://%s.%s.%s.svc:2379", c.scheme(), member, c.Name, c.Namespace)
}

// ServiceURL is the client Service, what an application would use.
func (c *Cluster) ServiceURL() string {
	return fmt.Sprintf("%s://%s.%s.svc:2379", c.scheme(), c.clientServiceName(), c.Namespace)
}

// clientServiceName is the client Service's name.
func (c *Cluster) clientServiceName() string { return c.Name + "-client" }

func (c *Cluster) scheme() string {
	if clientTLSFor(c.Name+"."+c.Namespace+".svc") != nil {
		return "https"
	}
	return "http"
}

// MemberURLs are the client URLs of every current Pod.
func (c *Cluster) MemberURLs() []string {
	var urls []string
	for _, name := range c.PodNames() {
		urls = append(urls, c.MemberURL(name))
	}
	return urls
}

// NewClient returns an etcd client on the endpoints. gRPC's reconnect backoff
// is lowered from its 120 s cap: members come and go within seconds here,
// and a client waiting two minutes to redial would measure gRPC, not etcd.
//
// https endpoints are called with the client certificate UseClientTLS
// registered for their cluster.
func NewClient(endpoints ...string) (*clientv3.Client, error) {
	if len(endpoints) == 0 {
		return nil, errors.New("etcd client: no endpoint")
	}
	return clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		TLS:         clientTLSForURL(endpoints[0]),
		DialTimeout: 2 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: time.Second,
		})},
	})
}

// Members reads etcd's member list, linearizably, through every current Pod.
func (c *Cluster) Members(ctx context.Context) ([]*etcdserverpb.Member, error) {
	cli, err := NewClient(c.MemberURLs()...)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	resp, err := cli.MemberList(ctx)
	if err != nil {
		return nil, fmt.Errorf("member list: %w", err)
	}
	return resp.Members, nil
}

// MemberIDs maps started members' names to their IDs.
func MemberIDs(members []*etcdserverpb.Member) map[string]string {
	ids := map[string]string{}
	for _, m := range members {
		ids[memberName(m)] = fmt.Sprintf("%x", m.ID)
	}
	return ids
}

// memberName is the member's name, or "(unstarted <id>)" for a member that
// was added and has not started yet, which etcd lists without a name.
func memberName(m *etcdserverpb.Member) string {
	if m.Name == "" {
		return fmt.Sprintf("(unstarted %x)", m.ID)
	}
	return m.Name
}

// DescribeMembers renders a member list for logs and errors.
func DescribeMembers(members []*etcdserverpb.Member) string {
	var parts []string
	for _, m := range members {
		s := fmt.Sprintf("%s[%x", memberName(m), m.ID)
		if m.IsLearner {
			s += " learner"
		}
		parts = append(parts, s+"]")
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

// HasPendingMember reports an unstarted member or a learner: a scale-out
// caught between MemberAdd and promotion.
func HasPendingMember(members []*etcdserverpb.Member) bool {
	for _, m := range members {
		if m.Name == "" || m.IsLearner {
			return true
		}
	}
	return false
}

// Leader returns the name of the member every reachable member calls leader.
func (c *Cluster) Leader(ctx context.Context) (string, error) {
	members, err := c.Members(ctx)
	if err != nil {
		return "", err
	}
	names := map[uint64]string{}
	for _, m := range members {
		names[m.ID] = m.Name
	}
	cli, err := NewClient(c.MemberURLs()...)
	if err != nil {
		return "", err
	}
	defer cli.Close()
	for _, m := range members {
		if len(m.ClientURLs) == 0 {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := cli.Status(sctx, m.ClientURLs[0])
		cancel()
		if err == nil && names[st.Leader] != "" {
			return names[st.Leader], nil
		}
	}
	return "", errors.New("no member names a leader")
}

// ParentStatus is the part of EtcdCluster.status the scenarios check.
type ParentStatus struct {
	ObservedGeneration int64  `json:"observedGeneration"`
	Phase              string `json:"phase"`
	CurrentVersion     string `json:"currentVersion"`
	Reason             string `json:"reason"`
	Size               int    `json:"size"`
	ReadyMembers       int    `json:"readyMembers"`
	Members            struct {
		Ready   []string `json:"ready"`
		Unready []string `json:"unready"`
	} `json:"members"`
	Bootstrap struct {
		SeedMember    string `json:"seedMember"`
		Bootstrapped  bool   `json:"bootstrapped"`
		ClusterID     string `json:"clusterID"`
		RecreatedFrom string `json:"recreatedFrom"`
		RevisionSeen  int64  `json:"revisionSeen"`
		Restore       *struct {
			Request string `json:"request"`
		} `json:"restore"`
	} `json:"bootstrap"`
	Conditions []struct {
		Type    string `json:"type"`
		Status  string `json:"status"`
		Reason  string `json:"reason"`
		Message string `json:"message"`
	} `json:"conditions"`
	TLS *struct {
		Certificates []struct {
			Name     string     `json:"name"`
			Secret   string     `json:"secret"`
			NotAfter time.Time  `json:"notAfter"`
			RenewAt  *time.Time `json:"renewAt"`
		} `json:"certificates"`
		CARotation string `json:"caRotation"`
		Static     *struct {
			OperatorSecret string `json:"operatorSecret"`
		} `json:"static"`
	} `json:"TLS"`
	Storage *struct {
		Requested string `json:"requested"`
		Capacity  string `json:"capacity"`
		Claims    []struct {
			Name      string `json:"name"`
			Requested string `json:"requested"`
			Capacity  string `json:"capacity"`
			Resizing  string `json:"resizing"`
		} `json:"claims"`
	} `json:"storage"`
	Hibernation *struct {
		Backup         string `json:"backup"`
		Request        string `json:"request"`
		FencedRevision int64  `json:"fencedRevision"`
		Revision       int64  `json:"revision"`
		Source         *struct {
			SHA256 string `json:"sha256"`
			S3     *struct {
				Path string `json:"path"`
			} `json:"s3"`
		} `json:"source"`
	} `json:"hibernation"`
	Auth *struct {
		Enabled bool     `json:"enabled"`
		Users   []string `json:"users"`
		Roles   []string `json:"roles"`
		Pending string   `json:"pending"`
	} `json:"auth"`
}

// Condition returns the status and reason of a condition, "" if absent.
func (s ParentStatus) Condition(typ string) (status, reason string) {
	for _, c := range s.Conditions {
		if c.Type == typ {
			return c.Status, c.Reason
		}
	}
	return "", ""
}

// Parent returns the parent's generation and decoded status.
func (c *Cluster) Parent() (generation int64, st ParentStatus, ok bool) {
	obj, ok := c.Env.MC.Parent(c.Namespace, c.Name)
	if !ok {
		return 0, st, false
	}
	var p struct {
		Metadata struct {
			Generation int64 `json:"generation"`
		} `json:"metadata"`
		Status ParentStatus `json:"status"`
	}
	data, err := json.Marshal(obj)
	if err != nil || json.Unmarshal(data, &p) != nil {
		return 0, st, false
	}
	return p.Metadata.Generation, p.Status, true
}

// statusSummary is what the scenarios expect of a converged parent's status.
type statusSummary struct {
	Generation   int64
	Phase        string
	Size         int
	ReadyMembers int
	Ready        []string
	Unready      []string
	Available    string
}

// Converged checks the whole world against size members: the parent's
// status (for the current generation), the Pods (all Ready, none leaving)
// and etcd's member list (every member started and voting, names equal to
// the Pods'). The explanation carries "(-want +got)" diffs.
func (c *Cluster) Converged(ctx context.Context, size int) (bool, string) {
	gen, st, ok := c.Parent()
	if !ok {
		return false, "parent is gone"
	}
	pods := c.Pods()
	var names []string
	for _, p := range pods {
		names = append(names, p.Name)
		if !p.Ready || p.Terminating {
			return false, fmt.Sprintf("pod %s: ready=%v terminating=%v", p.Name, p.Ready, p.Terminating)
		}
	}
	if len(pods) != size {
		return false, fmt.Sprintf("%d pods %v, want %d", len(pods), names, size)
	}
	available, _ := st.Condition("Available")
	want := statusSummary{Generation: gen, Phase: "Running", Size: size, ReadyMembers: size, Ready: names, Available: "True"}
	got := statusSummary{Generation: st.ObservedGeneration, Phase: st.Phase, Size: st.Size, ReadyMembers: st.ReadyMembers,
		Ready: sorted(st.Members.Ready), Unready: st.Members.Unready, Available: available}
	if d := cmp.Diff(want, got); d != "" {
		return false, fmt.Sprintf("status (reason %q) (-want +got):\n%s", st.Reason, d)
	}
	members, err := c.Members(ctx)
	if err != nil {
		return false, err.Error()
	}
	var voters []string
	for _, m := range members {
		if m.Name == "" || m.IsLearner || len(m.ClientURLs) == 0 {
			return false, "pending member: " + DescribeMembers(members)
		}
		voters = append(voters, m.Name)
	}
	if d := cmp.Diff(names, sorted(voters)); d != "" {
		return false, fmt.Sprintf("etcd members vs pods (-pods +members):\n%s", d)
	}
	return true, DescribeMembers(members)
}

// WaitConverged polls Converged and returns when it first held, which is the
// end of a scenario's wall time.
func (c *Cluster) WaitConverged(timeout time.Duration, size int) (time.Time, string, error) {
	var at time.Time
	var detail string
	err := c.Env.WaitFor(timeout, fmt.Sprintf("%s/%s converged at %d members", c.Namespace, c.Name, size), func() (bool, string) {
		ok, d := c.Converged(c.Env.Ctx(), size)
		if ok {
			at, detail = time.Now(), d
		}
		return ok, d
	})
	return at, detail, err
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}
