"""Writes the documentation comments of vjit's public headers as a C++ table for the Python module.

    python3 cpp_docs.py <doxygen xml directory> <output .inc>

The module's docstrings are these comments (python/src/docs.cpp looks them up by the C++
name), so a docstring changes when the comment does. The comments are read from Doxygen's
XML rather than from the headers' text: Doxygen already parses the headers for the API
reference (and fails the build on a public symbol without documentation), and it knows
what a comment belongs to - overloads, `///<` after a member, `@{ ... @}` groups sharing
one comment, nested classes - which a parser of `///` lines would have to guess.

Each entry: the qualified name ("vjit::Engine::train_step", "vjit::Init::Xavier"), the
overload (0 for the first declaration of that name in the header, 1 for the next...), and
the brief description, a blank line, then the detailed one, as plain text.
"""
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def text_of(element):
    """The text of a Doxygen description: paragraphs separated by blank lines, list items as '- '."""
    if element is None:
        return ""
    paragraphs = []

    def inline(node):
        parts = [node.text or ""]
        for child in node:
            if child.tag in ("itemizedlist", "orderedlist"):
                parts.append("\n")
                for item in child.findall("listitem"):
                    parts.append("- " + " ".join(inline(p).strip() for p in item) + "\n")
            elif child.tag in ("programlisting", "verbatim"):
                lines = ["".join(line.itertext()) for line in child.iter("codeline")] or [child.text or ""]
                parts.append("\n" + "\n".join("    " + line for line in lines) + "\n")
            elif child.tag == "sp":
                parts.append(" ")
            elif child.tag == "linebreak":
                parts.append("\n")
            elif child.tag == "simplesect" and child.get("kind") in ("return", "note", "see"):
                parts.append("\n" + child.get("kind").capitalize() + ": " + " ".join(inline(p).strip() for p in child))
            else:
                parts.append(inline(child))
            parts.append(child.tail or "")
        return "".join(parts)

    for para in element.findall("para"):
        text = "\n".join(" ".join(line.split()) if not line.startswith("    ") else line.rstrip()
                         for line in inline(para).strip().split("\n"))
        if text:
            paragraphs.append(text)
    return "\n\n".join(paragraphs)


def description(node):
    brief = text_of(node.find("briefdescription"))
    detailed = text_of(node.find("detaileddescription"))
    return "\n\n".join(part for part in (brief, detailed) if part)


def entries(xml_dir):
    """(qualified name, overload, text) of every documented compound, member and enumerator."""
    found = {}  # name -> [(line, text)]

    def add(name, location, text):
        if text:
            line = int(location.get("line", "0")) if location is not None else 0
            found.setdefault(name, []).append((line, text))

    for path in sorted(Path(xml_dir).glob("*.xml")):
        root = ET.parse(path).getroot()
        for compound in root.findall("compounddef"):
            if compound.get("kind") not in ("class", "struct", "namespace"):
                continue
            scope = compound.findtext("compoundname")
            if compound.get("kind") != "namespace":
                add(scope, compound.find("location"), description(compound))
            for member in compound.iter("memberdef"):
                if member.get("prot") == "private":
                    continue
                name = scope + "::" + member.findtext("name")
                add(name, member.find("location"), description(member))
                for value in member.findall("enumvalue"):
                    add(name + "::" + value.findtext("name"), None, description(value))
    for name, declarations in sorted(found.items()):
        for overload, (_, text) in enumerate(sorted(declarations, key=lambda d: d[0])):
            yield name, overload, text


def cpp_string(text):
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return '"' + escaped + '"'


def main():
    xml_dir, output = sys.argv[1], Path(sys.argv[2])
    lines = ["// Written by python/cpp_docs.py from Doxygen's XML of include/vjit/*.h; do not edit.\n"]
    for name, overload, text in entries(xml_dir):
        lines.append("{%s, %d, %s},\n" % (cpp_string(name), overload, cpp_string(text)))
    content = "".join(lines)
    if not output.exists() or output.read_text(encoding="utf-8") != content:
        output.write_text(content, encoding="utf-8")


if __name__ == "__main__":
    main()
