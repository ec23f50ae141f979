"""The README's Python example runs as shown."""
import os
import re

from conftest import REPO


def test_readme_python_example_runs(capsys):
    readme = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
    blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
    assert len(blocks) == 1, "the README shows one Python example"
    assert len(blocks[0].splitlines()) <= 30
    exec(compile(blocks[0], "README.md", "exec"), {})
    assert "sample 0's logits" in capsys.readouterr().out
