"""Rollout engines that run as a separate server process: the framework-neutral engine,
process management and HTTP client (vLLM is the one adapter; see ``adapter``)."""
