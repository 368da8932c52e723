"""`gpuwaste policy replay`: what an enforcement rule (cancel a job whose GPUs have been idle for
H hours, cap interactive jobs' run time) would have reclaimed and broken, replayed over the
analyses' result tables. Definitions: docs/analyses.md#replaying-enforcement-rules."""
