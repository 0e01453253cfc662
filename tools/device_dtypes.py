"""Where a lesson puts a dtype on ``device`` that Apple's MPS backend lacks: float64 or complex128.

On a Mac ``try_gpu()`` returns ``mps:0``, and torch refuses to make or move a float64 (or complex128) tensor
there (TypeError). A lesson that shows a dtype change on ``device`` uses float16; float64 work (gradient checks,
exact ranks, reference sums) runs on the CPU. This module reads a notebook's code cells in the order they run,
as the kernel would, and follows the data from the setup cell's ``device = try_gpu()``:

* *on device*: a tensor or module made with ``device=device`` (or ``device=t.device`` for ``t`` on device), moved
  with ``.to(device)`` or ``.to(t)``, or computed from something on device (``copy.deepcopy(net)``, ``net[0]``,
  ``x * 2``, the loop variable of ``for p in net.parameters()``), and everything a notebook function returns
  when it is called with such an argument or uses ``device`` itself (its body is read at each call, with its
  parameters bound to the arguments). ``.cpu()``, ``.to("cpu")``, ``device="meta"``, ``.item()``,
  ``.tolist()`` and ``.numpy()`` leave it;
* *float64*: made with ``dtype=torch.float64`` (``torch.double``, ``torch.complex128``, ``torch.cdouble``, or a
  name bound to one), converted with ``.double()``, ``.cdouble()``, ``.to(torch.float64)`` or
  ``.type(torch.float64)``, or computed from a float64 tensor.

A problem is a conversion to float64 of something on device, a move to device of something float64, and a
factory call that names both. Cells that run only on CUDA (tagged ``requires-cuda`` or ``requires-multi-gpu``)
are not read. The methods of a class are not followed (a module's ``forward`` is not read at the call): a
float64 tensor a ``forward`` makes on its input's device is not seen.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from tools.course import GPU_TAGS

#: The dtypes MPS does not have, as ``torch.<name>`` spells them.
MISSING = frozenset({"float64", "double", "complex128", "cdouble"})
#: Legacy tensor types of those dtypes (``.type(torch.DoubleTensor)``).
MISSING_TYPES = frozenset({"DoubleTensor", "torch.DoubleTensor", "torch.cuda.DoubleTensor"})
#: Methods that convert to one of them.
TO_MISSING = frozenset({"double", "cdouble"})
#: Methods that convert to a dtype MPS has.
TO_OTHER = frozenset({"float", "half", "bfloat16", "int", "long", "short", "bool", "byte", "char", "cfloat"})
#: Methods whose result is no tensor on the device.
LEAVING = frozenset({"cpu", "numpy", "tolist", "item", "untyped_storage", "data_ptr", "size", "dim", "numel"})
#: Methods that move to an accelerator.
TO_ACCELERATOR = frozenset({"cuda", "mps", "xpu"})
#: Functions whose result is no tensor.
NO_TENSOR = frozenset({"len", "isinstance", "issubclass", "str", "repr", "print", "type", "id", "hash", "range",
                       "bool", "int", "float", "callable", "hasattr", "format", "round"})
#: Functions that return the chosen device (``utils.devices``).
DEVICE_FUNCTIONS = frozenset({"try_gpu", "try_all_gpus"})


@dataclass(frozen=True)
class Value:
    """What the reading knows of an expression's value."""

    on_device: bool = False
    float64: bool = False
    device: bool = False  # the value is the chosen device (or a list of devices from try_all_gpus)
    missing_dtype: bool = False  # the value is one of the dtypes MPS lacks


NOTHING = Value()


def _join(values) -> Value:
    values = list(values)
    return Value(any(v.on_device for v in values), any(v.float64 for v in values), any(v.device for v in values),
                 any(v.missing_dtype for v in values))


@dataclass
class _Scope:
    names: dict[str, Value] = field(default_factory=dict)
    default_on_device: bool = False  # inside ``with torch.device(device):`` (or after set_default_device)


class _Reader:
    def __init__(self) -> None:
        self.scope = _Scope(names={"device": Value(device=True)})
        self.functions: dict[str, tuple[ast.FunctionDef, str]] = {}
        self.problems: dict[tuple[str, int], str] = {}
        self.cell = ""
        self.source = ""
        self.sources: dict[str, str] = {}
        self.calling: list[str] = []
        self.returns: list[list[Value]] = []

    # ---------------------------------------------------------------- findings
    def problem(self, node: ast.AST, why: str) -> None:
        code = ast.get_source_segment(self.source, node) or ast.unparse(node)
        code = " ".join(code.split())
        self.problems.setdefault((self.cell, node.lineno), f"{self.cell}, line {node.lineno}: {code}  ({why})")

    # ---------------------------------------------------------------- arguments of .to() and factories
    def _dtype(self, node: ast.AST | None) -> bool | None:
        """True: a dtype MPS lacks; False: another dtype; None: no dtype (or not known)."""
        if node is None:
            return None
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "torch":
            if node.attr in MISSING or node.attr in MISSING_TYPES:
                return True
            return False if not node.attr[0].isupper() or node.attr.endswith("Tensor") else None
        if isinstance(node, ast.Attribute) and node.attr == "dtype":
            value = self.value(node.value)
            return True if value.float64 else None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return True if node.value in MISSING_TYPES else None  # else a device, such as "cpu"
        if isinstance(node, ast.Name):
            known = self.scope.names.get(node.id)
            return True if known is not None and known.missing_dtype else None
        return None

    def _place(self, node: ast.AST | None) -> bool | None:
        """True: the chosen device; False: elsewhere (the CPU, meta, a string); None: no device named."""
        if node is None:
            return None
        if isinstance(node, ast.Constant):
            return False if isinstance(node.value, (str, int)) else None
        if isinstance(node, ast.Attribute) and node.attr == "device":
            return self.value(node.value).on_device
        if isinstance(node, ast.Call) and _dotted(node.func) == "torch.device":
            return any(self._place(a) for a in node.args)
        value = self.value(node)
        if value.device:
            return True
        if value.on_device:  # .to(other_tensor): its device (and dtype)
            return True
        return False if isinstance(node, ast.Name) and node.id in ("cpu", "meta") else None

    # ---------------------------------------------------------------- expressions
    def value(self, node: ast.AST | None) -> Value:
        if node is None:
            return NOTHING
        if isinstance(node, ast.Name):
            return self.scope.names.get(node.id, NOTHING)
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id == "torch":
                return Value(missing_dtype=node.attr in MISSING)
            if node.attr in ("device", "dtype", "shape", "is_meta", "is_cuda", "requires_grad"):
                self.value(node.value)
                return NOTHING
            return self.value(node.value)
        if isinstance(node, ast.Subscript):
            self.value(node.slice)
            return self.value(node.value)
        if isinstance(node, (ast.BinOp,)):
            return _join([self.value(node.left), self.value(node.right)])
        if isinstance(node, ast.UnaryOp):
            return self.value(node.operand)
        if isinstance(node, (ast.BoolOp,)):
            return _join(self.value(v) for v in node.values)
        if isinstance(node, ast.IfExp):
            self.value(node.test)
            return _join([self.value(node.body), self.value(node.orelse)])
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            return _join(self.value(e) for e in node.elts)
        if isinstance(node, ast.Dict):
            return _join(self.value(v) for v in [*node.keys, *node.values] if v is not None)
        if isinstance(node, ast.Starred):
            return self.value(node.value)
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            return self.comprehension(node)
        if isinstance(node, ast.NamedExpr):
            value = self.value(node.value)
            self.bind(node.target, value)
            return value
        if isinstance(node, ast.Lambda):
            return NOTHING
        for child in ast.iter_child_nodes(node):  # comparisons, f-strings, ...: read them for problems
            if isinstance(child, ast.expr):
                self.value(child)
        return NOTHING

    def comprehension(self, node) -> Value:
        saved = dict(self.scope.names)
        try:
            for gen in node.generators:
                self.bind(gen.target, self.value(gen.iter))
                for cond in gen.ifs:
                    self.value(cond)
            if isinstance(node, ast.DictComp):
                return _join([self.value(node.key), self.value(node.value)])
            return self.value(node.elt)
        finally:
            self.scope.names = saved

    def call(self, node: ast.Call) -> Value:
        keywords = {k.arg: k.value for k in node.keywords if k.arg is not None}
        for k in node.keywords:
            if k.arg is None:
                self.value(k.value)
        name = _dotted(node.func)
        func = node.func
        if isinstance(func, ast.Attribute) and not (isinstance(func.value, ast.Name) and func.value.id in (
                "torch", "nn", "F", "copy", "math", "np", "functools", "itertools", "utils")):
            return self.method(node, func.attr, self.value(func.value), keywords)
        args = [self.value(a) for a in node.args]
        kw_values = {k: self.value(v) for k, v in keywords.items() if k not in ("device", "dtype")}
        if name in DEVICE_FUNCTIONS or name.endswith((".try_gpu", ".try_all_gpus")):
            return Value(device=True)
        if name == "torch.device":
            return Value(device=any(a.device for a in args))
        if name == "torch.set_default_device":
            self.scope.default_on_device = bool(node.args) and bool(self._place(node.args[0]))
            return NOTHING
        if name in NO_TENSOR:
            return NOTHING
        if isinstance(func, ast.Name) and func.id in self.functions:
            return self.run_function(func.id, node, args, kw_values)
        place, dtype = self._place(keywords.get("device")), self._dtype(keywords.get("dtype"))
        if place is None:
            on_device = any(a.on_device for a in [*args, *kw_values.values()]) or (
                self.scope.default_on_device and name.startswith(("torch.", "nn.")))
        else:
            on_device = place
        float64 = dtype if dtype is not None else any(a.float64 for a in [*args, *kw_values.values()])
        if on_device and dtype:
            self.problem(node, "made on device in a dtype MPS lacks")
        return Value(on_device=on_device, float64=float64)

    def method(self, node: ast.Call, name: str, receiver: Value, keywords: dict[str, ast.AST]) -> Value:
        args = [self.value(a) for a in node.args]
        for key, value in keywords.items():
            if key not in ("device", "dtype"):
                self.value(value)
        if name in LEAVING:
            return NOTHING
        if name in TO_MISSING:
            if receiver.on_device:
                self.problem(node, "converts a tensor on device to a dtype MPS lacks")
            return Value(on_device=receiver.on_device, float64=True)
        if name in TO_OTHER:
            return Value(on_device=receiver.on_device)
        if name in TO_ACCELERATOR:
            if receiver.float64:
                self.problem(node, "moves a float64 tensor to an accelerator")
            return Value(on_device=True, float64=receiver.float64)
        if name in ("to", "type", "to_empty", "new_tensor", "new_zeros", "new_ones", "new_empty", "new_full"):
            place, dtype = self._place(keywords.get("device")), self._dtype(keywords.get("dtype"))
            for arg in node.args:
                arg_dtype = self._dtype(arg)
                if arg_dtype is not None:
                    dtype = arg_dtype if dtype is None else dtype
                    continue
                arg_place = self._place(arg)
                if arg_place is not None and name in ("to", "to_empty"):
                    place = arg_place if place is None else place
                    other = self.value(arg)
                    if other.on_device and other.float64 and dtype is None:
                        dtype = True
            on_device = receiver.on_device if place is None else place
            float64 = receiver.float64 if dtype is None else dtype
            if on_device and float64 and (place or dtype):
                self.problem(node, "puts a dtype MPS lacks on device")
            return Value(on_device=on_device, float64=float64)
        place, dtype = self._place(keywords.get("device")), self._dtype(keywords.get("dtype"))
        on_device = (receiver.on_device or any(a.on_device for a in args)) if place is None else place
        float64 = (receiver.float64 or any(a.float64 for a in args)) if dtype is None else dtype
        if on_device and dtype:
            self.problem(node, "computes on device in a dtype MPS lacks")
        return Value(on_device=on_device, float64=float64)

    def run_function(self, name: str, node: ast.Call, args: list[Value], keywords: dict[str, Value]) -> Value:
        """Read the body of a notebook function with its parameters bound to this call's arguments."""
        definition, cell = self.functions[name]
        if name in self.calling or len(self.calling) > 8:
            return _join([*args, *keywords.values()])
        params = [a.arg for a in [*definition.args.posonlyargs, *definition.args.args]]
        bound = dict(zip(params, args, strict=False))
        for key, value in keywords.items():
            bound[key] = value
        if definition.args.vararg is not None:
            bound[definition.args.vararg.arg] = _join(args[len(params):])
        saved_scope, saved_cell, saved_source = self.scope, self.cell, self.source
        self.scope = _Scope(names={**saved_scope.names, **bound}, default_on_device=saved_scope.default_on_device)
        self.cell, self.source = cell, self.sources[cell]
        self.calling.append(name)
        self.returns.append([])
        try:
            self.block(definition.body)
            returned = self.returns[-1]
        finally:
            self.returns.pop()
            self.calling.pop()
            self.scope, self.cell, self.source = saved_scope, saved_cell, saved_source
        return _join(returned)

    # ---------------------------------------------------------------- statements
    def bind(self, target: ast.AST, value: Value) -> None:
        if isinstance(target, ast.Name):
            if value == NOTHING:
                self.scope.names.pop(target.id, None)
            else:
                self.scope.names[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self.bind(element, value)
        elif isinstance(target, ast.Starred):
            self.bind(target.value, value)
        elif isinstance(target, (ast.Attribute, ast.Subscript)):
            self.value(target.value)

    def block(self, statements: list[ast.stmt]) -> None:
        for statement in statements:
            self.statement(statement)

    def statement(self, node: ast.stmt) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            self.functions[node.name] = (node, self.cell)
            self.scope.names.pop(node.name, None)
        elif isinstance(node, ast.ClassDef):
            self.scope.names.pop(node.name, None)
        elif isinstance(node, ast.Assign):
            value = self.value(node.value)
            for target in node.targets:
                self.bind(target, value)
        elif isinstance(node, ast.AnnAssign):
            if node.value is not None:
                self.bind(node.target, self.value(node.value))
        elif isinstance(node, ast.AugAssign):
            value = _join([self.value(node.target), self.value(node.value)])
            self.bind(node.target, value)
        elif isinstance(node, ast.For | ast.AsyncFor):
            self.bind(node.target, self.value(node.iter))
            self.block(node.body)
            self.block(node.orelse)
        elif isinstance(node, ast.While):
            self.value(node.test)
            self.block(node.body)
            self.block(node.orelse)
        elif isinstance(node, ast.If):
            self.value(node.test)
            self.block(node.body)
            self.block(node.orelse)
        elif isinstance(node, ast.With | ast.AsyncWith):
            before = self.scope.default_on_device
            for item in node.items:
                value = self.value(item.context_expr)
                if isinstance(item.context_expr, ast.Call) and _dotted(item.context_expr.func) == "torch.device":
                    self.scope.default_on_device = value.device
                if item.optional_vars is not None:
                    self.bind(item.optional_vars, value)
            self.block(node.body)
            self.scope.default_on_device = before
        elif isinstance(node, ast.Try):
            self.block(node.body)
            for handler in node.handlers:
                self.block(handler.body)
            self.block(node.orelse)
            self.block(node.finalbody)
        elif isinstance(node, ast.Return):
            value = self.value(node.value)
            if self.returns:
                self.returns[-1].append(value)
        elif isinstance(node, ast.Expr | ast.Assert | ast.Raise | ast.Delete):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.expr):
                    self.value(child)


def _dotted(node: ast.AST) -> str:
    """``torch.nn.Linear`` for that expression, ``""`` for what is not a dotted name."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return ""


def problems(nb) -> list[str]:
    """Every place in a notebook's code where a dtype MPS lacks lands on ``device``: ``"<cell id>, line <n>:
    <code>  (<why>)"``, in the order the cells run."""
    reader = _Reader()
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or GPU_TAGS & set(cell.get("metadata", {}).get("tags", [])):
            continue
        source = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in cell.source.split("\n"))
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        reader.cell = cell.get("id") or f"cell {index}"
        reader.source = reader.sources[reader.cell] = source
        reader.block(tree.body)
    return list(reader.problems.values())
