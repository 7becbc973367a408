package etcdtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

var healthClient = &http.Client{
	Timeout: healthRequestTimeout,
	Transport: &http.Transport{
		// Never route loopback probes through a proxy from the environment,
		// and keep no idle connections to processes we are about to kill.
		Proxy:             nil,
		DisableKeepAlives: true,
	},
}

// healthBody is the /health JSON in 3.4 ({"health":"true"}) and 3.5+
// ({"health":"true","reason":""}); health is a string in every version.
type healthBody struct {
	Health string `json:"health"`
}

func checkHealth(ctx context.Context, rawURL string) (bool, int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return false, 0, "", fmt.Errorf("etcdtest: health request: %w", err)
	}
	resp, err := healthClient.Do(req)
	if err != nil {
		return false, 0, "", fmt.Errorf("etcdtest: GET %s: %w", rawURL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return false, resp.StatusCode, "", fmt.Errorf("etcdtest: read %s: %w", rawURL, err)
	}
	var hb healthBody
	healthy := resp.StatusCode == http.StatusOK && json.Unmarshal(b, &hb) == nil && hb.Health == "true"
	return healthy, resp.StatusCode, string(b), nil
}

// waitHealthy polls every member's /health until all are healthy, one of
// them exits, or ctx ends. Members are polled concurrently because /health
// on a member without quorum blocks for the whole request timeout, which
// would otherwise delay noticing that its peers are ready. An early exit is
// reported at once: waiting out the timeout on a dead process only delays
// the real error.
func waitHealthy(ctx context.Context, members []*Member) error {
	start := time.Now()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		i    int
		last string
		err  error
	}
	results := make(chan result, len(members))
	for i, m := range members {
		go func() {
			last, err := m.pollHealthy(ctx)
			results <- result{i, last, err}
		}()
	}
	last := make([]string, len(members))
	var exitErr, ctxErr error
	for range members {
		r := <-results
		last[r.i] = r.last
		switch {
		case r.err == nil:
		case errors.Is(r.err, errExited):
			if exitErr == nil {
				exitErr = r.err
			}
			cancel()
		default:
			ctxErr = r.err
		}
	}
	if exitErr != nil {
		return exitErr
	}
	if ctxErr != nil {
		var b strings.Builder
		for i, m := range members {
			fmt.Fprintf(&b, "\n  %s (%s): %s", m.Name, m.ClientURL, last[i])
		}
		return fmt.Errorf("etcdtest: members not healthy after %v:%s: %w",
			time.Since(start).Round(time.Millisecond), b.String(), ctxErr)
	}
	return nil
}

var errExited = errors.New("exited before becoming healthy")

// pollHealthy returns the last observation ("healthy", an error, or a
// status and body) so a timeout can say what each member was doing.
func (m *Member) pollHealthy(ctx context.Context) (string, error) {
	ticker := time.NewTicker(healthPollInterval)
	defer ticker.Stop()
	last := "not polled yet"
	for {
		if m.proc == nil || m.proc.Exited() {
			var waitErr error
			if m.proc != nil {
				waitErr = m.proc.WaitErr()
			}
			return last, fmt.Errorf("etcdtest: member %s %w: %w", m.Name, errExited, exitError(waitErr))
		}
		healthy, status, body, err := checkHealth(ctx, m.healthBase()+"/health")
		switch {
		case healthy:
			return "healthy", nil
		case err != nil:
			last = err.Error()
		default:
			last = fmt.Sprintf("HTTP %d %s", status, strings.TrimSpace(body))
		}
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-ticker.C:
		}
	}
}

func exitError(err error) error {
	if err == nil {
		return errors.New("exit status 0")
	}
	return err
}
