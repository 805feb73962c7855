"""Pre-flight checks: everything a command can find wrong before it loads a model
(see heron.preflight.checks)."""

from heron.preflight.checks import PreflightReport, preflight, preflight_eval, preflight_sft

__all__ = ["PreflightReport", "preflight", "preflight_eval", "preflight_sft"]
