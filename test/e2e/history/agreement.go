package history

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Agreement asks every member, each through its own endpoint, for the
// hash of the key-value store at one revision and for its cluster ID:
// every member must answer, and all alike. A member that has not applied
// the revision yet is asked again, for up to timeout.
func Agreement(ctx context.Context, dial Dial, endpoints []string, timeout time.Duration) error {
	if len(endpoints) == 0 {
		return errors.New("history: agreement of no member")
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for ctx.Err() == nil {
		if last = agreeOnce(ctx, dial, endpoints); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	return last
}

type memberHash struct {
	endpoint   string
	clusterID  uint64
	hash       uint32
	compactRev int64
}

func agreeOnce(ctx context.Context, dial Dial, endpoints []string) error {
	first, err := dial(endpoints[0])
	if err != nil {
		return err
	}
	defer first.Close()
	// The revision: the newest the first member knows through a
	// linearizable read.
	get, err := first.Get(ctx, "/history/agreement")
	if err != nil {
		return fmt.Errorf("history: reading the revision through %s: %w", endpoints[0], err)
	}
	rev := get.Header.Revision
	var hashes []memberHash
	for _, ep := range endpoints {
		cli, err := dial(ep)
		if err != nil {
			return err
		}
		resp, err := cli.HashKV(ctx, ep, rev)
		_ = cli.Close()
		if err != nil {
			return fmt.Errorf("history: HashKV at revision %d from %s: %w", rev, ep, err)
		}
		hashes = append(hashes, memberHash{endpoint: ep, clusterID: resp.Header.ClusterId, hash: resp.Hash, compactRev: resp.CompactRevision})
	}
	ref := hashes[0]
	var diff []string
	for _, h := range hashes[1:] {
		if h.clusterID != ref.clusterID || h.hash != ref.hash || h.compactRev != ref.compactRev {
			diff = append(diff, fmt.Sprintf("%s: cluster %x, hash %08x, compacted at %d", h.endpoint, h.clusterID, h.hash, h.compactRev))
		}
	}
	if len(diff) > 0 {
		return fmt.Errorf("history: members disagree at revision %d: %s: cluster %x, hash %08x, compacted at %d; %s",
			rev, ref.endpoint, ref.clusterID, ref.hash, ref.compactRev, strings.Join(diff, "; "))
	}
	return nil
}
