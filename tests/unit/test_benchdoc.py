"""docs/benchmarks.md sections: each benchmark rewrites its own section and leaves the others."""

from __future__ import annotations

from pathlib import Path

from kctl.bench.doc import replace_section, write_section


def test_replace_keeps_other_sections_in_place() -> None:
    doc = "# Benchmarks\n\n## Pipeline\n\npipeline text\n\n## Node image\n\nold\n\n## Later\n\nlater text\n"
    new = replace_section(doc, "## Node image\n\nnew numbers\n")
    assert "old" not in new and "new numbers" in new
    assert new.index("## Pipeline") < new.index("## Node image") < new.index("## Later")
    assert "pipeline text" in new and "later text" in new


def test_append_and_create(tmp_path: Path) -> None:
    appended = replace_section("# Benchmarks\n\n## Pipeline\n\nx\n", "## Node image\n\ny\n")
    assert appended.endswith("## Node image\n\ny\n") and "## Pipeline\n\nx\n" in appended
    assert replace_section("", "## Node image\n\ny\n").startswith("# Benchmarks\n\n## Node image")
    p = tmp_path / "b.md"
    write_section("## Produce and consume\n\nn\n", p)
    write_section("## Produce and consume\n\nm\n", p)
    assert p.read_text() == "# Benchmarks\n\n## Produce and consume\n\nm\n"
