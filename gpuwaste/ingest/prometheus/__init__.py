"""The Prometheus source, OpenMetrics files, kube-state-metrics pods and jobs from labels."""
