"""Writes the module's docstrings into its type stubs, python/vjit/_vjit.pyi.

    PYTHONPATH=build/python python3 python/stub_docs.py [--check]

An editor that reads only the stubs shows their docstrings, so the stubs carry the module's:
the C++ headers' comments (python/cpp_docs.py) and what the bindings add to them. The
signatures in the stubs are written by hand; every docstring in them is replaced by the one
the built module has for that name (none where the module has none), so running this after a
comment changes is all it takes, and python/tests/test_docs.py fails while the stubs and the
module differ. --check writes nothing and exits 1 when the stubs would change.
"""
import ast
import inspect
import re
import sys
from pathlib import Path

STUB = Path(__file__).resolve().parent / "vjit" / "_vjit.pyi"
# `name(...) -> T`, or `(self: T) -> U` for a property (the stub has the signature).
SIGNATURE_LINE = re.compile(r"^\w*\(.*\)( -> .*)?$")
OVERLOAD_LINE = re.compile(r"^\d+\. \w+\(.*$")


def without_signatures(doc):
    """A pybind11 docstring without its signature line(s) (the stub has the signature)."""
    lines = (doc or "").strip("\n").splitlines()
    while lines and SIGNATURE_LINE.match(lines[0]):
        lines.pop(0)
    return inspect.cleandoc("\n".join(lines)) if lines else ""


def overload_docs(doc):
    """The docstring of each overload of a pybind11 function, in the module's order."""
    sections, current = [], None
    for line in (doc or "").splitlines():
        if OVERLOAD_LINE.match(line):
            current = []
            sections.append(current)
        elif current is not None:
            current.append(line)
    return [inspect.cleandoc("\n".join(lines)) for lines in sections]


def member_doc(owner, name, overload):
    """The module's docstring of `owner.name` (declaration `overload` of an overloaded one)."""
    if inspect.isclass(owner) and "__entries" in vars(owner):  # a pybind11 enum's value
        entry = vars(owner)["__entries"].get(name)
        if entry is not None:
            return entry[1] or ""
    attribute = vars(owner).get(name)
    if attribute is None:
        return ""
    if isinstance(attribute, property):
        return without_signatures(attribute.__doc__ or (attribute.fget.__doc__ if attribute.fget else ""))
    if isinstance(attribute, staticmethod):
        attribute = attribute.__func__
    doc = getattr(attribute, "__doc__", None) or ""
    if "\nOverloaded function.\n" in doc:
        docs = overload_docs(doc)
        return docs[overload] if overload < len(docs) else ""
    if inspect.isclass(attribute) or inspect.ismodule(attribute):
        return inspect.cleandoc(doc)
    return without_signatures(doc)


def docstring_literal(text, indent):
    """`text` as a triple-quoted literal whose value is exactly `text`, indented for the stub."""
    escaped = text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    if escaped.endswith('"'):
        escaped = escaped[:-1] + '\\"'
    lines = escaped.splitlines()
    if len(lines) == 1:
        return indent + '"""' + escaped + '"""'
    body = "\n".join((indent + line) if line else "" for line in lines[1:])
    return indent + '"""' + lines[0] + "\n" + body + "\n" + indent + '"""'


class Renderer:
    def __init__(self, source, module):
        self.lines = source.splitlines(keepends=True)
        self.tree = ast.parse(source)
        self.module = module
        # A stub class standing for a module attribute that is not a class (`models: _Models`).
        self.annotated = {node.annotation.id: node.target.id for node in self.tree.body
                          if isinstance(node, ast.AnnAssign) and isinstance(node.annotation, ast.Name)}

    def text(self, start, end):
        """The source between two (line, column) positions (1-based lines)."""
        (l0, c0), (l1, c1) = start, end
        if l0 == l1:
            return self.lines[l0 - 1][c0:c1]
        return self.lines[l0 - 1][c0:] + "".join(self.lines[l0:l1 - 1]) + self.lines[l1 - 1][:c1]

    def statement(self, node):
        return self.text((node.lineno, node.col_offset), (node.end_lineno, node.end_col_offset))

    @staticmethod
    def is_docstring(node):
        return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)

    @staticmethod
    def start(node):
        """Where a statement starts: a decorated one at its first decorator's '@'."""
        decorators = getattr(node, "decorator_list", None)
        if decorators:
            return decorators[0].lineno, decorators[0].col_offset - 1
        return node.lineno, node.col_offset

    def header(self, node, body):
        """`def name(...) -> T:` or `class Name(Base):` as written, decorators before it."""
        decorators = "".join(self.statement(d).join(("@", "\n")) for d in node.decorator_list)
        return decorators, self.text((node.lineno, node.col_offset), self.start(body[0])).rstrip()

    def definition(self, node, owner, indent, overloads):
        """A def or class with the module's docstring of its name and nothing else in its body."""
        body = node.body
        decorators, header = self.header(node, body)
        prefix = "".join(line + "\n" + indent for line in decorators.splitlines())
        members = [n for n in body if not self.is_docstring(n) and not self.is_ellipsis(n)]
        if isinstance(node, ast.ClassDef):
            target = self.resolve_class(node.name, owner)
            doc = self.class_doc(node.name, owner, target)
        else:
            overload = overloads.get(node.name, 0)
            overloads[node.name] = overload + 1
            doc = member_doc(owner, node.name, overload) if owner is not None else ""
        parts = [prefix + header]
        if doc:
            parts.append("\n" + docstring_literal(doc, indent + "    "))
        if isinstance(node, ast.ClassDef) and members:
            parts.append("\n" + self.members(members, target, indent + "    "))
        elif not doc:
            parts[-1] += " ..."
        return "".join(parts)

    @staticmethod
    def is_ellipsis(node):
        return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and node.value.value is Ellipsis

    def resolve_class(self, name, owner):
        found = getattr(owner, name, None)
        if found is None and owner is self.module and name in self.annotated:
            found = getattr(self.module, self.annotated[name], None)
        return found

    def class_doc(self, name, owner, target):
        if target is None:
            return ""
        if inspect.ismodule(target) or issubclass(target, BaseException) or owner is self.module:
            return inspect.cleandoc(target.__doc__ or "")
        return member_doc(owner, name, 0)

    def members(self, nodes, owner, indent):
        rendered, overloads = [], {}
        for node in nodes:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                rendered.append(indent + self.definition(node, owner, indent, overloads))
                continue
            rendered.append(indent + self.statement(node))
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and owner is not None:
                doc = member_doc(owner, node.target.id, 0)
                if doc:  # an attribute's docstring: the string right after it
                    rendered.append(docstring_literal(doc, indent))
        return "\n".join(rendered)

    def render(self):
        out, position = [], (1, 0)
        for node in self.tree.body:
            out.append(self.text(position, self.start(node)))  # blank lines and comments as written
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                out.append(self.definition(node, self.module, "", {}))
            else:
                out.append(self.statement(node))
            position = (node.end_lineno, node.end_col_offset)
        out.append(self.text(position, (len(self.lines), len(self.lines[-1]))))
        return "".join(out)


def render(source, module):
    """The stub `source` with every docstring the module's (the module docstring kept)."""
    return Renderer(source, module).render()


def main():
    # This folder holds the package's source, without the built module: PYTHONPATH's comes first.
    here = Path(__file__).resolve().parent
    sys.path = [p for p in sys.path if Path(p or ".").resolve() != here]
    from vjit import _vjit

    check = "--check" in sys.argv[1:]
    current = STUB.read_text(encoding="utf-8")
    wanted = render(current, _vjit)
    if wanted == current:
        return 0
    if check:
        print(f"{STUB} differs from the module's docstrings: run python/stub_docs.py", file=sys.stderr)
        return 1
    STUB.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
