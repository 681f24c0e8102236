"""Compile `templates/*.j2` into `launcher/_templates_compiled.py`: plain Python, no jinja2 at render time.

The Jinja templates stay the source of the manifests. This build step parses each with Jinja's own
parser (the environment `render` always used: StrictUndefined, no autoescape, trailing newline kept,
so whitespace control is already applied to the template data) and writes one Python function per
template and per macro. Only the constructs the templates use are translated — template data,
`{{ expr | filter }}`, `if`/`elif`/`else`, `is none` tests, comparisons, `not`/`and`/`or`, attribute
reads, macros with their calls, `{% filter indent(...) %}` blocks, `{% from ... import %}` — and anything
else fails generation with its template and line, never translated approximately.

tests/test_template_compile.py fails when the committed module is stale and renders every golden
config through both Jinja and the compiled module, requiring identical text (`render_with_jinja`).

    python -m launcher.template_compile [--check]     (also run by hack/gen_chart.py chart / check)
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from launcher.generated import generator_main

TEMPLATE_DIR = Path(__file__).with_name("templates")
OUT_PATH = Path(__file__).with_name("_templates_compiled.py")
REGEN = "python -m launcher.template_compile"
FILTERS = ("q", "json")  # render's filters, passed in at render time; `indent` is template_runtime.indent
_COMPARE = {"eq": "==", "ne": "!=", "gt": ">", "gteq": ">=", "lt": "<", "lteq": "<="}


def jinja_env():
    """The Jinja environment the templates are written for (also the reference renderer of the tests)."""
    import jinja2

    from launcher.render import q, to_flow

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=False,
    )
    env.filters["q"] = q
    env.filters["json"] = to_flow
    return env


def render_with_jinja(template: str, **context: Any) -> str:
    """The text Jinja renders from `template`: what the compiled function must reproduce."""
    return jinja_env().get_template(template).render(**context)


class Unsupported(Exception):
    """A template construct this compiler does not translate."""


def _ident(template: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in template.removesuffix(".j2"))


class _Compiler:
    def __init__(self, template: str, macros: dict[str, str]):
        self.template = template
        self.macros = macros  # macro name visible here -> Python function name
        self.lines: list[str] = []
        self.locals: set[str] = set()

    def fail(self, node, what: str) -> Unsupported:
        return Unsupported(f"{self.template}:{getattr(node, 'lineno', '?')}: {what} is not supported by {REGEN}")

    def emit(self, depth: int, line: str) -> None:
        self.lines.append("    " * depth + line)

    def body(self, nodes: list, depth: int, out: str) -> None:
        from jinja2 import nodes as n

        for node in nodes:
            if isinstance(node, n.Output):
                for child in node.nodes:
                    if isinstance(child, n.TemplateData):
                        if child.data:
                            self.emit(depth, f"{out}({child.data!r})")
                    else:
                        self.emit(depth, f"{out}(str({self.expr(child)}))")
            elif isinstance(node, n.If):
                self.emit(depth, f"if {self.expr(node.test)}:")
                self.block(node.body, depth + 1, out)
                for elif_ in node.elif_:
                    self.emit(depth, f"elif {self.expr(elif_.test)}:")
                    self.block(elif_.body, depth + 1, out)
                if node.else_:
                    self.emit(depth, "else:")
                    self.block(node.else_, depth + 1, out)
            elif isinstance(node, n.FilterBlock):
                flt = node.filter
                if flt.name != "indent" or flt.dyn_args or flt.dyn_kwargs or flt.node is not None:
                    raise self.fail(node, f"filter block {flt.name!r}")
                inner = f"_b{depth}"
                self.emit(depth, f"{inner} = []")
                self.block(node.body, depth, f"{inner}.append")
                args = [f'"".join({inner})', *(self.expr(a) for a in flt.args),
                        *(f"{kw.key}={self.expr(kw.value)}" for kw in flt.kwargs)]
                self.emit(depth, f"{out}(_indent({', '.join(args)}))")
            else:
                raise self.fail(node, type(node).__name__)

    def block(self, nodes: list, depth: int, out: str) -> None:
        start = len(self.lines)
        self.body(nodes, depth, out)
        if len(self.lines) == start:
            self.emit(depth, "pass")

    def expr(self, node) -> str:
        from jinja2 import nodes as n

        if isinstance(node, n.Name):
            if node.name in self.locals:
                return node.name
            return f"c[{node.name!r}]"
        if isinstance(node, n.Const):
            return repr(node.value)
        if isinstance(node, n.Getattr):
            return f"_attr({self.expr(node.node)}, {node.attr!r})"
        if isinstance(node, n.Filter):
            if node.name not in FILTERS or node.args or node.kwargs or node.dyn_args or node.dyn_kwargs:
                raise self.fail(node, f"filter {node.name!r} with arguments" if node.name in FILTERS
                                else f"filter {node.name!r}")
            return f"f[{node.name!r}]({self.expr(node.node)})"
        if isinstance(node, n.Test):
            if node.name != "none" or node.args or node.kwargs:
                raise self.fail(node, f"test {node.name!r}")
            return f"({self.expr(node.node)} is None)"
        if isinstance(node, n.Not):
            return f"(not {self.expr(node.node)})"
        if isinstance(node, (n.And, n.Or)):
            op = "and" if isinstance(node, n.And) else "or"
            return f"({self.expr(node.left)} {op} {self.expr(node.right)})"
        if isinstance(node, n.Compare):
            parts = [self.expr(node.expr)]
            for operand in node.ops:
                if operand.op not in _COMPARE:
                    raise self.fail(node, f"comparison {operand.op!r}")
                parts += [_COMPARE[operand.op], self.expr(operand.expr)]
            return f"({' '.join(parts)})"
        if isinstance(node, n.Call):
            if (not isinstance(node.node, n.Name) or node.node.name not in self.macros or node.kwargs
                    or node.dyn_args or node.dyn_kwargs):
                raise self.fail(node, "a call other than of an imported or local macro with positional arguments")
            return f"{self.macros[node.node.name]}(f, {', '.join(self.expr(a) for a in node.args)})"
        raise self.fail(node, type(node).__name__)


def _parse(env, template: str):
    source, _, _ = env.loader.get_source(env, template)
    return env.parse(source, template)


def compile_templates() -> str:
    """The generated module's text."""
    from jinja2 import nodes as n

    env = jinja_env()
    names = sorted(p.name for p in TEMPLATE_DIR.glob("*.j2"))
    code: list[str] = []
    entry: dict[str, str] = {}
    for template in names:
        tree = _parse(env, template)
        prefix = _ident(template)
        macros = {m.name: f"_{prefix}__{m.name}" for m in tree.find_all(n.Macro)}
        visible = dict(macros)
        top: list = []
        for node in tree.body:
            if isinstance(node, n.FromImport):
                if node.with_context or not isinstance(node.template, n.Const):
                    raise Unsupported(f"{template}:{node.lineno}: an import with context or a computed name")
                source = _ident(node.template.value)
                for name in node.names:
                    if not isinstance(name, str):
                        raise Unsupported(f"{template}:{node.lineno}: `import ... as ...`")
                    visible[name] = f"_{source}__{name}"
            elif isinstance(node, n.Macro):
                if node.defaults:
                    raise Unsupported(f"{template}:{node.lineno}: macro defaults")
                comp = _Compiler(template, visible)
                params = [a.name for a in node.args]
                comp.locals = set(params)
                comp.emit(0, f"def {macros[node.name]}(f, {', '.join(params)}):")
                comp.emit(1, f'"""Macro {node.name} of {template}."""')
                comp.emit(1, "_o = []")
                comp.block(node.body, 1, "_o.append")
                comp.emit(1, 'return "".join(_o)')
                code += ["", "", *comp.lines]
            elif isinstance(node, n.Output) and all(isinstance(d, n.TemplateData) and not d.data.strip()
                                                    for d in node.nodes) and macros:
                continue  # whitespace between a macro library's macros: never rendered
            else:
                top.append(node)
        if template.startswith("_"):
            if top:
                raise Unsupported(f"{template}: a macro library with output outside its macros")
            continue
        comp = _Compiler(template, visible)
        func = f"render_{prefix}"
        comp.emit(0, f"def {func}(c, f):")
        comp.emit(1, f'"""{template}: `c` the context, `f` the filters {FILTERS}."""')
        comp.emit(1, "_o = []")
        comp.block(top, 1, "_o.append")
        comp.emit(1, 'return "".join(_o)')
        code += ["", "", *comp.lines]
        entry[template] = func
    table = "\n".join(f"    {t!r}: {f}," for t, f in entry.items())
    return (f'"""GENERATED by `{REGEN}` from templates/*.j2: do not edit (tests fail when it is stale).\n\n'
            "Each template as a function of its context `c` and the filters `f`; Jinja's semantics in\n"
            "launcher.template_runtime. The source of the manifests is the templates, not this file.\n"
            '"""\n\n'
            "# fmt: off\n"
            "# ruff: noqa\n"
            "from launcher.template_runtime import attr as _attr\n"
            "from launcher.template_runtime import indent as _indent\n"
            + "\n".join(code) + "\n\n\nTEMPLATES = {\n" + table + "\n}\n")


def main(argv: list[str] | None = None) -> int:
    return generator_main(argv, description=__doc__.split("\n\n")[0], path=OUT_PATH, text=compile_templates,
                          sources="templates/", regen=REGEN)


if __name__ == "__main__":
    sys.exit(main())
