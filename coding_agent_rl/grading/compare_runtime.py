"""The grader's comparison helper: runs *inside the grading sandbox*, in the test process.

Not imported by the package at run time: the grader copies it into the plugin directory under a
random name, and the staged hidden test files call :func:`v` on the operands of their assertions
(``compare_rewrite.py``). :func:`v` hands back a value the comparison can trust: a value built of
exact standard types as it is; an instance of a builtin subclass whose comparison-related dunders
the agent's diff wrote, reduced to its exact base type through the base type's own C methods;
another object whose dunders the diff wrote, wrapped so that it compares only with another such
object. Stdlib only, Python 3.6 compatible. Rules and limits: docs/modules/grading.md.
"""

import dis
import os
import re
import sys

_SCALARS = frozenset([int, float, complex, bool, str, bytes, bytearray, type(None)])
_CONTAINERS = frozenset([list, tuple, dict, set, frozenset])
# Builtin bases an instance is reduced to, most specific first (bool cannot be subclassed).
_BASES = (int, float, complex, str, bytes, bytearray, list, tuple, dict, set, frozenset)
_ALL = frozenset(
    [
        "__eq__",
        "__ne__",
        "__lt__",
        "__le__",
        "__gt__",
        "__ge__",
        "__hash__",
        "__iter__",
        "__len__",
        "__contains__",
        "__getitem__",
        "__bool__",
        "__class__",
        "__getattr__",
        "__getattribute__",
        "__index__",
        "__int__",
        "__float__",
        "__complex__",
        "__str__",
        "__bytes__",
        "__reversed__",
        "__instancecheck__",
        "__subclasscheck__",
    ]
)
_EQ = frozenset(["__eq__", "__ne__", "__hash__"])
_MODES = {
    "e": _EQ,
    "o": frozenset(["__lt__", "__le__", "__gt__", "__ge__"]),
    "i": frozenset(["__contains__", "__iter__", "__getitem__"]),
}
_HEAPTYPE = 1 << 9
_MRO = type.__dict__["__mro__"].__get__
_DICT = type.__dict__["__dict__"].__get__
_MODULE = type.__dict__["__module__"].__get__
_QUALNAME = type.__dict__["__qualname__"].__get__
_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,\d+)? @@")
_MAX_DEPTH = 200
_FUNCTION = type(lambda: None)

_CONF = {"workdir": "/", "diff": "", "exempt": [], "own": []}
_OWN = None  # {real path: qualnames of the dunders consulted as the diff has them}
_TOUCHED = None  # {absolute path: set of new-side line numbers the diff added or removed at}
_TRUST = {}  # type: dict  # type -> bool (its comparisons are not the diff's)
_SPANS = {}  # type: dict  # code object -> (first, last line)


def _activate(conf):
    global _TOUCHED, _OWN
    _CONF.update(conf)
    _TOUCHED = None
    _OWN = None
    _TRUST.clear()


def _own():
    global _OWN
    if _OWN is None:
        own = {}  # type: dict
        for pair in _CONF.get("own") or ():
            path = _real(os.path.join(str(_CONF["workdir"]), str(pair[0])))
            own.setdefault(path, set()).add(str(pair[1]))
        _OWN = own
    return _OWN


def _unquote(name):
    name = name.strip()
    if name.startswith('"') and name.endswith('"'):
        try:
            name = name[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape")
            name = name.encode("latin-1").decode("utf-8", "surrogateescape")
        except Exception:
            pass
    return name


def parse_diff(text, workdir, exempt=()):
    """``{absolute path: {line, ...}}``: the new-side lines each file's hunks add, and the lines
    next to the ones they remove (a removal inside a function changes it too)."""
    out = {}  # type: dict
    lines = None
    new = 0
    skip = set(os.path.normpath(e) for e in exempt)
    for raw in text.splitlines():
        if raw.startswith("+++ "):
            name = _unquote(raw[4:])
            lines = None
            if name != "/dev/null":
                rel = os.path.normpath(name[2:] if name.startswith("b/") else name)
                if rel not in skip:
                    lines = out.setdefault(os.path.join(workdir, rel), set())
            continue
        if raw.startswith("diff --git "):
            lines = None
            continue
        m = _HUNK.match(raw)
        if m:
            new = int(m.group(1))
            continue
        if lines is None:
            continue
        if raw.startswith("+"):
            lines.add(new)
            new += 1
        elif raw.startswith("-"):
            lines.add(new)
        elif raw.startswith(" "):
            new += 1
    return out


def _touched():
    global _TOUCHED
    if _TOUCHED is None:
        text = ""
        if _CONF.get("diff"):
            try:
                with open(str(_CONF["diff"]), "rb") as f:
                    text = f.read().decode("utf-8", "surrogateescape")
            except OSError:
                text = ""
        _TOUCHED = parse_diff(text, _CONF["workdir"], _CONF.get("exempt", ()))
    return _TOUCHED


def _real(path):
    try:
        return os.path.realpath(path)
    except Exception:
        return path


def _span(code):
    span = _SPANS.get(code)
    if span is None:
        lines = [ln for _, ln in dis.findlinestarts(code) if ln] or [code.co_firstlineno]
        for const in code.co_consts:
            if hasattr(const, "co_code"):
                lines.extend(_span(const))
        span = _SPANS[code] = (min(code.co_firstlineno, *lines), max(lines))
    return span


def _codes(value, depth=0):
    """The code objects behind a class attribute (functions, methods, properties, wrappers);
    None where it is some other kind of callable or descriptor."""
    if depth > 8:
        return None
    if value is None:
        return []
    kind = type(value)
    if kind in (staticmethod, classmethod):
        return _codes(value.__func__, depth + 1)
    if kind is property:
        out = []
        for f in (value.fget, value.fset, value.fdel):
            got = _codes(f, depth + 1)
            if got is None:
                return None
            out.extend(got)
        return out
    code = value.__code__ if kind is _FUNCTION else None
    if code is not None:
        out = [code]
        wrapped = value.__dict__.get("__wrapped__")
        if wrapped is not None:
            more = _codes(wrapped, depth + 1)
            if more is None:
                return None
            out.extend(more)
        return out
    if not (_flags(kind) & _HEAPTYPE) and kind.__name__ in (
        "wrapper_descriptor",
        "method_descriptor",
        "getset_descriptor",
        "member_descriptor",
    ):  # a builtin type's own C method (``__eq__ = str.__eq__``)
        objclass = getattr(value, "__objclass__", None)
        return [] if objclass is not None and not (_flags(objclass) & _HEAPTYPE) else None
    return None  # a builtin function, a type, a callable object: called without ``self``


def _flags(t):
    return type.__dict__["__flags__"].__get__(t)


_PREFIXES = []  # type: list


def _installed(path):
    """Whether ``path`` lies where the interpreter and its packages are installed (not, say, a
    file written under /tmp while the tests ran)."""
    if not _PREFIXES:
        import sysconfig

        roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
        for name in ("stdlib", "platstdlib", "purelib", "platlib"):
            try:
                roots.add(sysconfig.get_paths()[name])
            except Exception:
                pass
        try:
            import site

            roots.update(site.getsitepackages())
        except Exception:
            pass
        _PREFIXES.extend(sorted(_real(r).rstrip(os.sep) + os.sep for r in roots if r))
    return any(path.startswith(r) for r in _PREFIXES)


def _module_file(cls):
    mod = sys.modules.get(_MODULE(cls))
    path = getattr(mod, "__file__", None) if mod is not None else None
    return _real(path) if isinstance(path, str) else None


def _reachable(cls):
    obj = sys.modules.get(_MODULE(cls))
    qual = _QUALNAME(cls)
    if "<locals>" in qual:
        return True  # a class made inside a function: judged by its module's file alone
    for part in qual.split("."):
        obj = getattr(obj, part, None)
    return obj is cls


def _class_trusted(cls, watched):
    """Whether no ``watched`` dunder of ``cls`` (its own ``__dict__``) is the diff's doing."""
    if not (_flags(cls) & _HEAPTYPE):
        return True
    own = _DICT(cls)
    names = [n for n in own if n in watched]
    if not names:
        return True
    touched = _touched()
    home = _module_file(cls)
    home_ok = home is not None and home not in touched and _reachable(cls)
    gold = _own().get(home, ()) if home is not None else ()
    for name in names:
        if gold and _QUALNAME(cls) + "." + name in gold and _reachable(cls):
            continue  # the task's fix is this very method: the diff's version is the one to run
        codes = _codes(own[name])
        if codes is None:  # an odd callable: only the class's own (untouched) module vouches
            if not home_ok:
                return False
            continue
        for code in codes:
            path = code.co_filename
            full = _real(path) if os.path.isabs(path) else None
            if full is None or not os.path.isfile(full):  # generated (dataclass, attrs, exec)
                if not home_ok:
                    return False
                continue
            if not _defined_at(code, full):  # a borrowed file name (compile(src, "/usr/...")
                return False
            lines = touched.get(full)
            if lines is not None:
                first, last = _span(code)
                if any(first <= ln <= last for ln in lines):
                    return False
                continue
            workdir = _real(_CONF["workdir"])
            inside = full == workdir or full.startswith(workdir.rstrip(os.sep) + os.sep)
            if not inside and not _installed(full):  # written at run time, e.g. under /tmp
                return False
    return True


def _defined_at(code, path):
    """Whether the file's text at the code's first line defines it (``def <name>``, a lambda,
    or decorators then ``def <name>``)."""
    import linecache

    name = code.co_name
    for k in range(code.co_firstlineno, code.co_firstlineno + 40):
        line = linecache.getline(path, k).strip()
        if not line or line.startswith(("@", "#")):
            continue
        if name == "<lambda>":
            return "lambda" in line
        return re.match(r"(async\s+)?def\s+" + re.escape(name) + r"\b", line) is not None
    return False


def trusted(t, mode="e"):
    """Whether instances of ``t`` compare by their own methods in ``mode`` (``e``: equality,
    ``o``: ordering, ``i``: containment, ``*``: every watched dunder): none the diff wrote."""
    key = (t, mode)
    got = _TRUST.get(key)
    if got is None:
        watched = _ALL if "*" in mode else frozenset().union(*(_MODES[m] for m in mode))
        got = all(_class_trusted(c, watched) for c in _MRO(t)) and all(
            _class_trusted(c, watched) for c in _MRO(type(t))
        )
        _TRUST[key] = got
    return got


class Untrusted:
    """An object whose comparison is the diff's: equal only to another such object, by its own
    ``==`` (a type the diff defines is what the test built its expected value from)."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def _with(self, other, op):
        if type(other) is not Untrusted:
            return False  # a standard or trusted value: the diff's type cannot judge it
        if not (_state_clean(self.value, False) and _state_clean(other.value, False)):
            return False  # what they hold would judge it
        try:
            got = op(self.value, other.value)
        except Exception:
            return False
        return got if type(got) is bool else False

    def __eq__(self, other):
        return self._with(other, lambda a, b: a == b)

    def __ne__(self, other):
        return self._with(other, lambda a, b: a != b)

    def __lt__(self, other):
        return self._with(other, lambda a, b: a < b)

    def __le__(self, other):
        return self._with(other, lambda a, b: a <= b)

    def __gt__(self, other):
        return self._with(other, lambda a, b: a > b)

    def __ge__(self, other):
        return self._with(other, lambda a, b: a >= b)

    def __hash__(self):
        return 0

    def __repr__(self):
        try:
            text = object.__repr__(self.value)
        except Exception:
            text = "?"
        return "<compared by the grader as untrusted: " + text + ">"


def _base_value(x, base):
    """``x`` as an exact ``base``, read through ``base``'s own C methods."""
    if base is int:
        return int.__int__(x)
    if base is float:
        return float.__float__(x)
    if base is complex:
        return complex(complex.__dict__["real"].__get__(x), complex.__dict__["imag"].__get__(x))
    if base in (str,):
        return str.__str__(x)
    if base in (bytes, bytearray, list, tuple):
        return base.__getitem__(x, slice(None))
    if base is dict:
        return dict.copy(x)
    return base.copy(x)  # set, frozenset


_SCAN_CAP = 100000


def _proxy(t):
    import weakref

    return t is weakref.ProxyType or t is weakref.CallableProxyType


def _state_clean(x, strict=True):
    """Whether nothing ``x`` holds (``gc.get_referents``, numpy object arrays) is an instance
    whose comparisons the diff wrote (``strict``), or a builtin subclass the diff steers (not
    ``strict``): the ``==`` of ``x`` may hand the comparison to it."""
    import gc

    if _proxy(type(x)):
        return False
    seen, todo, n = set(), [x], 0
    while todo:
        obj = todo.pop()
        t = type(obj)
        if t in _SCALARS or id(obj) in seen or issubclass(t, _SKIP):
            continue
        seen.add(id(obj))
        n += 1
        if n > _SCAN_CAP or _proxy(t):
            return False
        steered = obj is not x and t not in _CONTAINERS and not trusted(t, "*")
        if steered and (strict or any(issubclass(t, b) for b in _BASES)):
            return False
        if (
            t.__name__ == "ndarray"
            and _MODULE(t) == "numpy"
            and getattr(getattr(obj, "dtype", None), "kind", "") == "O"
        ):
            try:
                todo.extend(obj.ravel().tolist())
            except Exception:
                return False
        todo.extend(gc.get_referents(obj))
    return True


_SKIP = (type, type(sys), type(_activate), type(_activate.__code__), type(len))


def _canon(x, depth, mode):
    """(value, changed): ``x`` with everything the diff's types could steer replaced."""
    t = type(x)
    if t in _SCALARS:
        return x, False
    if depth > _MAX_DEPTH:
        return Untrusted(x), True
    if t not in _CONTAINERS:
        reducible = [b for b in _BASES if issubclass(t, b)]
        if reducible and trusted(t, "*"):
            if reducible[0] not in _CONTAINERS:
                return x, False  # an int or str subclass none of whose dunders is the diff's
            inner, changed = _canon(_base_value(x, reducible[0]), depth + 1, mode)
            return (inner, True) if changed else (x, False)  # OrderedDict, Counter, namedtuple
        if reducible:  # a builtin subclass the diff steers: its base type's own content
            return _canon(_base_value(x, reducible[0]), depth + 1, mode)[0], True
        if trusted(t, mode) and _state_clean(x):
            return x, False  # a trusted object (Decimal, URL, datetime, ...): its own ==
        return Untrusted(x), True
    inner = "eo" if "o" in mode else "e"  # elements: by ==, and by < where the op orders
    if t is list or t is tuple:
        items, changed = [], False
        for item in x:
            v, c = _canon(item, depth + 1, inner)
            items.append(v)
            changed = changed or c
        if not changed:
            return x, False
        return (items if t is list else tuple(items)), True
    if t is dict:
        pairs, changed = [], False
        for k, val in x.items():
            k2, c1 = _canon(k, depth + 1, "e")
            v2, c2 = _canon(val, depth + 1, "e")
            pairs.append((k2, v2))
            changed = changed or c1 or c2
        return (dict(pairs), True) if changed else (x, False)
    items, changed = [], False
    for item in x:
        v, c = _canon(item, depth + 1, "e")
        items.append(v)
        changed = changed or c
    return (t(items), True) if changed else (x, False)


def v(x, mode="e"):
    """The operand of a hidden test's comparison, as the grader lets it compare (``mode``: the
    comparisons it takes part in, see :func:`trusted`)."""
    if type(x) in _SCALARS:
        return x
    return _canon(x, 0, mode)[0]
