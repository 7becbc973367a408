# Monitoring checks (manifests/monitoring): filled in by the monitoring work.
.PHONY: test-monitoring
test-monitoring:
	@echo "test-monitoring: not written yet" >&2; exit 1
