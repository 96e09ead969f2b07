"""Runs of requests: the spec, the run and its requests' states, the fair share across visitors, the store, history and figures."""
