"""vjit.Options: every VJIT_* option as an attribute and a keyword, validated as the variables are."""
import os
import subprocess
import sys

import pytest

import vjit


def test_every_option_is_an_attribute_and_a_keyword():
    names = vjit.option_names()
    assert len(names) >= 30
    defaults = vjit.Options.defaults()
    assert list(defaults.to_dict()) == names
    for name in names:  # the docstring is the options table's, as docs/options.md
        assert ("VJIT_" + name.upper()) in vjit.Options.__dict__[name].__doc__ or name == "trace", name
    for name in names:
        value = getattr(defaults, name)
        assert isinstance(value, (bool, int, str)), name
        # A keyword set to the value read back gives equal options.
        assert vjit.Options.defaults(**{name: value}) == defaults, name


def test_values_read_back_as_set():
    options = vjit.Options.defaults(threads=3, fusion=False, policy="DEPTH", max_memory="2M", pretranspose=True)
    assert options.threads == 3 and options.fusion is False and options.policy == "depth"
    assert options.max_memory == 2 << 20 and options.pretranspose == "on"
    options.cache_dir = "/tmp/somewhere"
    options.lazy = "off"
    assert options.cache_dir == "/tmp/somewhere" and options.lazy is False
    assert "threads=3" in options.describe() and str(options) == options.describe()
    assert options.replace(threads=1).threads == 1 and options.threads == 3
    assert vjit.Options.defaults() != options


@pytest.mark.parametrize("name, value", [("policy", "nope"), ("fusion", "maybe"), ("threads", 0),
                                         ("max_memory", "12Q"), ("pretranspose", "sometimes")])
def test_bad_values_raise_the_variables_message(name, value):
    with pytest.raises(vjit.UserError) as as_keyword:
        vjit.Options(**{name: value})
    with pytest.raises(vjit.UserError) as as_attribute:
        setattr(vjit.Options.defaults(), name, value)
    assert str(as_keyword.value) == str(as_attribute.value)
    assert f"='{value}' is not a valid" in str(as_keyword.value) and "valid values" in str(as_keyword.value)
    # The same validation as the environment's, naming the variable there.
    variable = "VJIT_" + name.upper()
    run = subprocess.run([sys.executable, "-c", "import vjit; vjit.Options()"], capture_output=True, text=True,
                         env={**os.environ, variable: str(value)})
    assert run.returncode != 0 and f"{variable}='{value}' is not a valid" in run.stderr
    assert str(as_keyword.value).split("is not a valid", 1)[1] in run.stderr


def test_an_unknown_option_lists_the_valid_ones():
    with pytest.raises(vjit.UserError, match="unknown option 'fusoin'; valid options: --fusion"):
        vjit.Options(fusoin=True)


def test_options_start_from_the_variables(monkeypatch):
    monkeypatch.setenv("VJIT_POLICY", "frontier")
    assert vjit.Options().policy == "frontier"
    assert vjit.Options.from_env().policy == "frontier"
    assert vjit.Options.defaults().policy == "agenda"


def test_the_engine_runs_the_options_given_then_the_keywords():
    model = vjit.Model(seed=1)
    W = model.add("W", (4, 4))
    program = vjit.Program(model)
    program.add_type("leaf", lambda f: f.scatter(f.tanh(f.matmul(W, f.pull(4)))))
    options = vjit.Options.defaults(policy="depth", fusion=False, threads=1)
    engine = vjit.Engine(program, options, fusion=True)
    assert engine.options.policy == "depth" and engine.options.fusion is True and engine.options.threads == 1
    # The engine's options are resolved: its levers are on or off, never auto.
    assert vjit.Options.defaults().pretranspose == "auto"
    assert engine.options.pretranspose in ("on", "off") and engine.options.tf32 in ("on", "off")
    assert options.fusion is False, "the engine does not change the Options it was given"
