"""Acting on waste: the per-job report, notices to the people who hold idle GPUs, and replays
of enforcement rules over history. Reads the warehouse and the analyses' result tables; nothing
in `warehouse` or `analyses` imports this package."""
