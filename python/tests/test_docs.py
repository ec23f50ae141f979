"""The docstrings come from the C++ headers' comments, every public name has one, and the
type stubs (vjit/_vjit.pyi) name what the module has, with the module's parameter names and
docstrings."""
import ast
import difflib
import importlib.util
import inspect
import re
from pathlib import Path

import vjit
from vjit import _vjit

ROOT = Path(__file__).resolve().parents[2]
STUB = ROOT / "python" / "vjit" / "_vjit.pyi"
HEADERS = sorted((ROOT / "include" / "vjit").glob("*.h"))

def public_names(owner):
    """The public members of a class; of an enum type, not the name and value pybind11 adds."""
    names = {n for n in vars(owner) if not n.startswith("_")}
    return names - {"name", "value"} if hasattr(owner, "__members__") else names


def classes():
    return {n: getattr(_vjit, n) for n in vjit.__all__ if inspect.isclass(getattr(_vjit, n))
            and not issubclass(getattr(_vjit, n), BaseException)}


def own_doc(obj):
    """The docstring without pybind11's signature line(s)."""
    doc = inspect.getdoc(obj) or ""
    if isinstance(obj, property) and not obj.__doc__:
        doc = inspect.getdoc(obj.fget) or ""
    lines = doc.splitlines()
    while lines and re.match(r"^\w*\(.*\)( -> .*)?$", lines[0]):  # a property's: (self: T) -> U
        lines.pop(0)
    return "\n".join(lines).strip()


def comment_text():
    """Every header's comments, markup and line breaks removed, for finding a docstring in them."""
    text = []
    for header in HEADERS:
        for line in header.read_text(encoding="utf-8").splitlines():
            comment = re.search(r"//+<?\s?(.*)$", line)
            if comment:
                text.append(comment.group(1))
    return normalised(" ".join(text))


def normalised(text):
    return " ".join(re.sub(r"@\{|@\}", " ", text.replace("`", "")).split())


def test_every_public_name_has_a_docstring():
    missing = []
    for name, cls in classes().items():
        if not own_doc(cls):
            missing.append(name)
        for member in public_names(cls):
            if not own_doc(vars(cls)[member]):
                missing.append(f"{name}.{member}")
    for name in vjit.__all__:
        obj = getattr(_vjit, name)
        if callable(obj) and not inspect.isclass(obj) and not own_doc(obj):
            missing.append(name)
    for name in ("model_names", "make_model", "Bundle"):
        if not own_doc(getattr(vjit.models, name)):
            missing.append(f"models.{name}")
    for member in public_names(vjit.models.Bundle):
        if not own_doc(vars(vjit.models.Bundle)[member]):
            missing.append(f"models.Bundle.{member}")
    assert missing == [], "without a docstring: " + ", ".join(sorted(missing))


def test_docstrings_taken_from_the_cpp_headers_are_their_comments():
    taken = _vjit._cpp_docs()
    assert len(taken) >= 40, "the module takes few docstrings from the headers"
    comments = comment_text()
    drifted = []
    for name, overload, text in taken:
        brief = normalised(text.split("\n\n")[0])
        # Doxygen ends a brief taken from a trailing ///< comment with a full stop.
        if brief.rstrip(".")[:60] not in comments:
            drifted.append(f"{name}#{overload}: {brief[:60]!r}")
    assert drifted == [], "not found in include/vjit/*.h: " + "; ".join(drifted)


def takes_one_of(declarations, doc):
    """Whether `doc` holds the brief description of one of the C++ declarations' comments."""
    return any(normalised(text.split("\n\n")[0]) in normalised(doc) for text in declarations)


def test_members_of_documented_cpp_members_take_their_comments():
    """A method, property or enumerator named as a member of the C++ class of the same name
    has that member's comment in its docstring, not a hand-written copy."""
    table = _vjit._cpp_doc_table()
    hand_written = []
    options = set(vjit.option_names())  # their docstrings are the options table's (test_options)
    for name, cls in classes().items():
        if f"vjit::{name}" in table and not takes_one_of(table[f"vjit::{name}"], own_doc(cls)):
            hand_written.append(f"vjit::{name}")
        for member in public_names(cls):
            cpp = f"vjit::{name}::{member}"
            if cpp in table and not (name == "Options" and member in options):
                attribute = vars(cls)[member]
                doc = own_doc(attribute if isinstance(attribute, property) else getattr(cls, member))
                if not takes_one_of(table[cpp], doc):
                    hand_written.append(cpp)
    assert hand_written == [], "docstrings not taken from the headers: " + ", ".join(sorted(hand_written))


def test_a_docstring_is_the_cpp_comment_of_its_member():
    header = (ROOT / "include" / "vjit" / "engine.h").read_text(encoding="utf-8")
    comment = re.search(r"((?:\s*///[^\n]*\n)+)\s*Evaluation<float> infer\(", header)
    assert comment, "engine.h's comment of Engine::infer"
    lines = [re.sub(r"^\s*/// ?", "", line) for line in comment.group(1).splitlines() if "@" not in line]
    first_sentence = " ".join(" ".join(lines).split()).split(";")[0]
    assert len(first_sentence) > 20 and first_sentence in " ".join(own_doc(vjit.Engine.infer).split())


def stub_tree():
    return ast.parse(STUB.read_text(encoding="utf-8"))


def stub_classes():
    return {node.name: node for node in stub_tree().body if isinstance(node, ast.ClassDef)}


def stub_members(node):
    names = set()
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(item.name)
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            names.add(item.target.id)
        elif isinstance(item, ast.Assign):
            names.update(t.id for t in item.targets if isinstance(t, ast.Name))
    return {n for n in names if not n.startswith("_")}


def test_the_stubs_name_every_class_and_member_of_the_module():
    stubs = stub_classes()
    differences = []
    for name, cls in classes().items():
        if name not in stubs:
            differences.append(f"class {name} is not in the stubs")
            continue
        module_side = public_names(cls)
        stub_side = stub_members(stubs[name])
        for member in sorted(module_side - stub_side):
            differences.append(f"{name}.{member} is not in the stubs")
        for member in sorted(stub_side - module_side):
            differences.append(f"{name}.{member} is in the stubs but not in the module")
    top_level = {n.name for n in stub_tree().body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    for name in vjit.__all__:
        if name not in top_level and name != "models":
            differences.append(f"{name} is not in the stubs")
    assert differences == [], "\n".join(differences)


def signature_parameters(doc_line):
    inside = doc_line[doc_line.index("(") + 1:doc_line.rindex(")")]
    names = re.findall(r"(?:^|,\s*)(\*{1,2}\w+|\w+(?=\s*:))", inside)
    # pybind11 names every **keywords parameter kwargs: only whether there is one is compared
    return [re.sub(r"^(\*+)\w+$", r"\1", name) for name in names]


def test_the_stubs_take_the_parameters_the_module_takes():
    differences = []
    for class_name, node in stub_classes().items():
        cls = getattr(_vjit, class_name, None)
        if cls is None:
            continue
        for item in node.body:
            if not isinstance(item, ast.FunctionDef) or item.decorator_list or item.name not in vars(cls):
                continue
            doc = getattr(vars(cls)[item.name], "__doc__", None) or ""
            if "Overloaded function" in doc or not doc.startswith(item.name + "("):
                continue
            module_side = signature_parameters(doc.splitlines()[0])
            args = item.args
            stub_side = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
            stub_side += ["*"] if args.vararg else []
            stub_side += ["**"] if args.kwarg else []
            if module_side != stub_side:
                differences.append(f"{class_name}.{item.name}: module {module_side}, stubs {stub_side}")
    assert differences == [], "\n".join(differences)


def stub_docs():
    """python/stub_docs.py, which writes the module's docstrings into the stubs."""
    spec = importlib.util.spec_from_file_location("stub_docs", ROOT / "python" / "stub_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_stubs_carry_the_docstrings_of_the_module():
    current = STUB.read_text(encoding="utf-8")
    wanted = stub_docs().render(current, _vjit)
    diff = list(difflib.unified_diff(current.splitlines(), wanted.splitlines(), "stubs", "module", lineterm="", n=0))
    assert diff == [], ("the stubs' docstrings are not the module's; PYTHONPATH=build/python python3 "
                        "python/stub_docs.py writes them:\n" + "\n".join(diff[:40]))


def test_a_stub_docstring_is_the_docstring_of_the_module():
    """Read back from the stubs as Python reads them: the same text as the module's."""
    stubs = stub_classes()
    engine_members = {item.name: item for item in stubs["Engine"].body if isinstance(item, ast.FunctionDef)}
    assert ast.get_docstring(engine_members["infer"]) == own_doc(vjit.Engine.infer)
    assert ast.get_docstring(stubs["Model"]) == inspect.getdoc(vjit.Model)
    functions = {node.name: node for node in stub_tree().body if isinstance(node, ast.FunctionDef)}
    assert ast.get_docstring(functions["save_checkpoint"]) == own_doc(vjit.save_checkpoint)
    documented = [node for node in ast.walk(stub_tree())
                  if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and ast.get_docstring(node)]
    assert len(documented) > 150, "few docstrings in the stubs"


def test_a_stub_docstring_that_differs_from_the_module_is_replaced():
    current = STUB.read_text(encoding="utf-8")
    first_line = own_doc(vjit.Engine.infer).splitlines()[0]
    edited = current.replace(first_line, first_line + " (edited)", 1)
    removed = current.replace('"""' + own_doc(vjit.Model.find) + '"""', "...", 1)
    assert edited != current and removed != current
    render = stub_docs().render
    assert render(edited, _vjit) == current
    assert render(removed, _vjit) == current
