"""The bench: cells over layouts and variants, their report, Pareto set and plots."""
