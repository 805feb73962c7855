"""docs/hooks.md's reference is the code's: regenerated from heron.plugins.hooks (the
signatures the loader checks) and compared with the file, so the two cannot drift."""

from heron.plugins.docs import DOC_PATH, render_reference, splice
from heron.plugins.hooks import HOOK_POINTS
from heron.plugins.loader import expected_signature


def test_doc_reference_matches_the_code():
    doc = DOC_PATH.read_text()
    assert splice(doc, render_reference()) == doc, "docs/hooks.md is stale: run python -m heron.plugins.docs"


def test_every_hook_point_is_in_the_doc_with_its_checked_signature():
    doc = DOC_PATH.read_text()
    for point in HOOK_POINTS.values():
        assert f"### {point.name}" in doc
        assert expected_signature(point) in doc
        assert point.when in doc


def test_every_documented_example_passes_the_loader_check():
    from heron.plugins.loader import check_hook

    for point in HOOK_POINTS.values():
        namespace: dict = {}
        exec(compile(point.example, f"<example {point.name}>", "exec"), namespace)
        defined = [v for k, v in namespace.items() if not k.startswith("__")]
        assert len(defined) == 1, point.name
        assert check_hook(point, defined[0]) == "", point.name
