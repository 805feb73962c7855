"""vLLM as heron's rollout engine: a server in its own venv, driven over HTTP (docs/engines.md)."""
