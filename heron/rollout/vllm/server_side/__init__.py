"""Files run by the vLLM venv's python, not heron's: they import nothing from heron."""
