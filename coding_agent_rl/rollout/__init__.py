"""One rollout end to end: session -> sandbox -> agent -> diff -> grade -> samples."""
