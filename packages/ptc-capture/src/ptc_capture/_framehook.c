/* PEP 523 frame evaluation hook for ptc_capture (CPython 3.11, 3.12, 3.13).
 *
 * Each thread may set a Python callback.  For every fresh, plain function frame that the
 * thread evaluates while a callback is set, the hook calls callback(FrameState) and
 *   - None          -> the frame runs normally;
 *   - a code object -> a new function with that code, the frame's globals and closure is
 *                      called with the frame's arguments, and its result is the frame's result;
 *   - a function    -> it is called with the frame's arguments as they are (frames with
 *                      positional parameters only), and its result is the frame's result.
 * Frames created while the callback runs, generator/coroutine frames, module and class
 * bodies, and code objects flagged as skipped never reach the callback.
 *
 * The layout of _PyInterpreterFrame is mirrored below instead of including CPython's
 * internal headers: those need Py_BUILD_CORE and drag in headers that are not meant to be
 * compiled outside CPython (3.13 especially).  The mirrors are checked against each
 * version's Include/internal/pycore_frame.h.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#include <structmember.h>
#include <stdbool.h>
#include <stdint.h>

#if PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030E0000
#error "ptc_capture._framehook supports CPython 3.11 to 3.13"
#endif

#ifdef Py_GIL_DISABLED
#error "ptc_capture._framehook needs the GIL (free-threaded builds are not supported)"
#endif

#define PTC_PY311 (PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000)
#define PTC_PY313 (PY_VERSION_HEX >= 0x030D0000)

/* ---- mirror of _PyInterpreterFrame (Include/internal/pycore_frame.h) ---- */
#if PTC_PY311
typedef struct ptc_frame {
    PyFunctionObject *f_func;
    PyObject *f_globals;
    PyObject *f_builtins;
    PyObject *f_locals;
    PyCodeObject *f_code;
    PyFrameObject *frame_obj;
    struct ptc_frame *previous;
    _Py_CODEUNIT *prev_instr;
    int stacktop;
    bool is_entry;
    char owner;
    PyObject *localsplus[1];
} ptc_frame;
#define FRAME_CODE(f) ((f)->f_code)
#define FRAME_FUNC(f) ((PyObject *)(f)->f_func)
#elif !PTC_PY313
typedef struct ptc_frame {
    PyCodeObject *f_code;
    struct ptc_frame *previous;
    PyObject *f_funcobj;
    PyObject *f_globals;
    PyObject *f_builtins;
    PyObject *f_locals;
    PyFrameObject *frame_obj;
    _Py_CODEUNIT *prev_instr;
    int stacktop;
    uint16_t return_offset;
    char owner;
    PyObject *localsplus[1];
} ptc_frame;
#define FRAME_CODE(f) ((f)->f_code)
#define FRAME_FUNC(f) ((f)->f_funcobj)
#else
typedef struct ptc_frame {
    PyObject *f_executable;
    struct ptc_frame *previous;
    PyObject *f_funcobj;
    PyObject *f_globals;
    PyObject *f_builtins;
    PyObject *f_locals;
    PyFrameObject *frame_obj;
    uint16_t *instr_ptr; /* _Py_CODEUNIT is internal in 3.13; both are 2 bytes */
    int stacktop;
    uint16_t return_offset;
    char owner;
    PyObject *localsplus[1];
} ptc_frame;
#define FRAME_CODE(f) ((PyCodeObject *)(f)->f_executable)
#define FRAME_FUNC(f) ((f)->f_funcobj)
#endif

#define PTC_FRAME_OWNED_BY_THREAD 0

#if PY_VERSION_HEX >= 0x030C0000
#define ptc_request_extra PyUnstable_Eval_RequestCodeExtraIndex
#define ptc_get_extra PyUnstable_Code_GetExtra
#define ptc_set_extra PyUnstable_Code_SetExtra
#else
#define ptc_request_extra _PyEval_RequestCodeExtraIndex
#define ptc_get_extra _PyCode_GetExtra
#define ptc_set_extra _PyCode_SetExtra
#endif

/* A frame that has not executed any instruction yet: its arguments are in place, but the
 * prologue (COPY_FREE_VARS, MAKE_CELL) has not run, so cells and free variables are still
 * reachable only through the function's closure. */
static int frame_is_fresh(ptc_frame *f) {
    PyCodeObject *code = FRAME_CODE(f);
#if PTC_PY313
    return (void *)f->instr_ptr == (void *)code->co_code_adaptive;
#else
    return f->prev_instr == _PyCode_CODE(code) - 1;
#endif
}

/* ---- per-thread state ---- */
typedef struct {
    PyObject *callback;  /* strong reference or NULL */
    int guard;           /* >0 while the callback (or the skip predicate) runs */
    int skip_next;       /* the next frame is the replacement we just started */
} thread_state;

static _Thread_local thread_state tls;

/* ---- interpreter-wide state (protected by the GIL) ---- */
static Py_ssize_t n_enabled_threads = 0;
static int hook_installed = 0;
static _PyFrameEvalFunction previous_eval = NULL;
static PyObject *skip_predicate = NULL;  /* callable(code) -> bool, or NULL */
static Py_ssize_t cache_extra_index = -1;
static Py_ssize_t flag_extra_index = -1;

/* co_extra flag values for the skip decision; stored as tagged pointers, not objects. */
#define FLAG_UNKNOWN ((void *)0)
#define FLAG_SKIP ((void *)1)
#define FLAG_RUN ((void *)2)

static void free_cache_extra(void *p) { Py_XDECREF((PyObject *)p); }
static void free_flag_extra(void *p) { (void)p; }

static PyObject *eval_frame(PyThreadState *tstate, struct _PyInterpreterFrame *iframe, int throwflag);

static void install_hook(void) {
    PyInterpreterState *interp = PyInterpreterState_Get();
    if (!hook_installed) {
        previous_eval = _PyInterpreterState_GetEvalFrameFunc(interp);
        _PyInterpreterState_SetEvalFrameFunc(interp, eval_frame);
        hook_installed = 1;
    }
}

static void uninstall_hook(void) {
    PyInterpreterState *interp = PyInterpreterState_Get();
    if (hook_installed) {
        _PyInterpreterState_SetEvalFrameFunc(
            interp, previous_eval ? previous_eval : _PyEval_EvalFrameDefault);
        hook_installed = 0;
    }
}

static inline PyObject *run_default(PyThreadState *tstate, struct _PyInterpreterFrame *f, int throwflag) {
    if (previous_eval != NULL && previous_eval != eval_frame) {
        return previous_eval(tstate, f, throwflag);
    }
    return _PyEval_EvalFrameDefault(tstate, f, throwflag);
}

/* ---- FrameState: what the callback sees ---- */
typedef struct {
    PyObject_HEAD
    PyObject *f_code;
    PyObject *f_globals;
    PyObject *f_builtins;
    PyObject *f_locals;
    PyObject *closure;
    PyObject *function;
} FrameState;

static void FrameState_dealloc(FrameState *self) {
    Py_XDECREF(self->f_code);
    Py_XDECREF(self->f_globals);
    Py_XDECREF(self->f_builtins);
    Py_XDECREF(self->f_locals);
    Py_XDECREF(self->closure);
    Py_XDECREF(self->function);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef FrameState_members[] = {
    {"f_code", T_OBJECT, offsetof(FrameState, f_code), READONLY, "code object of the frame"},
    {"f_globals", T_OBJECT, offsetof(FrameState, f_globals), READONLY, "globals of the frame"},
    {"f_builtins", T_OBJECT, offsetof(FrameState, f_builtins), READONLY, "builtins of the frame"},
    {"f_locals", T_OBJECT, offsetof(FrameState, f_locals), READONLY,
     "dict of the frame's arguments by name (the only locals bound at frame entry)"},
    {"closure", T_OBJECT, offsetof(FrameState, closure), READONLY,
     "tuple of cells for co_freevars, or None"},
    {"function", T_OBJECT, offsetof(FrameState, function), READONLY, "the function being called"},
    {NULL},
};

static PyObject *FrameState_repr(FrameState *self) {
    PyCodeObject *code = (PyCodeObject *)self->f_code;
    return PyUnicode_FromFormat("<FrameState %U at %U:%d>", code->co_qualname, code->co_filename,
                                code->co_firstlineno);
}

static PyTypeObject FrameStateType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ptc_capture._framehook.FrameState",
    .tp_basicsize = sizeof(FrameState),
    .tp_dealloc = (destructor)FrameState_dealloc,
    .tp_repr = (reprfunc)FrameState_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A snapshot of a fresh frame handed to the capture callback.",
    .tp_members = FrameState_members,
};

static int n_arg_slots(PyCodeObject *code) {
    int n = code->co_argcount + code->co_kwonlyargcount;
    if (code->co_flags & CO_VARARGS) n++;
    if (code->co_flags & CO_VARKEYWORDS) n++;
    return n;
}

static PyObject *function_closure(PyObject *func) {
    if (func == NULL || !PyFunction_Check(func)) return NULL;
    return PyFunction_GET_CLOSURE(func);
}

static PyObject *make_frame_state(ptc_frame *f) {
    PyCodeObject *code = FRAME_CODE(f);
    FrameState *st = PyObject_New(FrameState, &FrameStateType);
    if (st == NULL) return NULL;
    st->f_code = Py_NewRef((PyObject *)code);
    st->f_globals = Py_NewRef(f->f_globals);
    st->f_builtins = Py_NewRef(f->f_builtins);
    st->function = Py_NewRef(FRAME_FUNC(f) ? FRAME_FUNC(f) : Py_None);
    PyObject *closure = function_closure(FRAME_FUNC(f));
    st->closure = Py_NewRef(closure ? closure : Py_None);
    st->f_locals = PyDict_New();
    if (st->f_locals == NULL) {
        Py_DECREF(st);
        return NULL;
    }
    int n = n_arg_slots(code);
    for (int i = 0; i < n; i++) {
        PyObject *value = f->localsplus[i];
        if (value == NULL) continue;
        PyObject *name = PyTuple_GET_ITEM(code->co_localsplusnames, i);
        if (PyDict_SetItem(st->f_locals, name, value) < 0) {
            Py_DECREF(st);
            return NULL;
        }
    }
    return (PyObject *)st;
}

/* ---- skip decision, cached per code object ---- */
static int code_is_skipped(PyCodeObject *code) {
    void *flag = FLAG_UNKNOWN;
    if (ptc_get_extra((PyObject *)code, flag_extra_index, &flag) < 0) {
        PyErr_Clear();
        return 1;
    }
    if (flag == FLAG_SKIP) return 1;
    if (flag == FLAG_RUN) return 0;
    int skip = 0;
    if (skip_predicate != NULL) {
        tls.guard++;
        PyObject *res = PyObject_CallOneArg(skip_predicate, (PyObject *)code);
        tls.guard--;
        if (res == NULL) {
            /* A broken predicate must not break the user's program: report and skip. */
            PyErr_WriteUnraisable(skip_predicate);
            return 1;
        }
        skip = PyObject_IsTrue(res);
        Py_DECREF(res);
        if (skip < 0) {
            PyErr_WriteUnraisable(skip_predicate);
            skip = 1;
        }
    }
    if (ptc_set_extra((PyObject *)code, flag_extra_index, skip ? FLAG_SKIP : FLAG_RUN) < 0) {
        PyErr_Clear();
    }
    return skip;
}

/* ---- releasing the frame we did not evaluate ---- */
#if !PTC_PY311
/* From 3.12 on, the evaluation function owns the entry frame: _PyEval_EvalFrameDefault
 * clears and pops it on return (3.11's _PyEval_Vector did that after the call instead).
 * When the frame is replaced we never evaluate it, so we do what _PyFrame_ClearExceptCode
 * and _PyThreadState_PopFrame do for a fresh frame that has no frame object. */
static void release_frame(PyThreadState *tstate, ptc_frame *f) {
    for (int i = 0; i < f->stacktop; i++) {
        Py_CLEAR(f->localsplus[i]);
    }
    Py_CLEAR(f->f_locals);
    Py_CLEAR(f->f_funcobj);
#if PTC_PY313
    Py_CLEAR(f->f_executable);
#else
    Py_CLEAR(f->f_code);
#endif
    PyObject **base = (PyObject **)f;
    _PyStackChunk *chunk = tstate->datastack_chunk;
    if (base == &chunk->data[0]) {
        /* The frame opened a new chunk: free it and return to the previous one. */
        _PyStackChunk *previous = chunk->previous;
        tstate->datastack_top = &previous->data[previous->top];
        tstate->datastack_chunk = previous;
        tstate->datastack_limit = (PyObject **)(((char *)previous) + previous->size);
        PyObjectArenaAllocator arena;
        PyObject_GetArenaAllocator(&arena);
        arena.free(arena.ctx, chunk, chunk->size);
    }
    else {
        tstate->datastack_top = base;
    }
}
#else
static void release_frame(PyThreadState *tstate, ptc_frame *f) {
    (void)tstate;
    (void)f;
}
#endif

/* ---- running a replacement code object ---- */
static int same_signature(PyCodeObject *a, PyCodeObject *b) {
    const int mask = CO_VARARGS | CO_VARKEYWORDS;
    return a->co_argcount == b->co_argcount && a->co_posonlyargcount == b->co_posonlyargcount &&
           a->co_kwonlyargcount == b->co_kwonlyargcount && (a->co_flags & mask) == (b->co_flags & mask);
}

static PyObject *run_replacement(ptc_frame *f, PyCodeObject *new_code) {
    PyCodeObject *code = FRAME_CODE(f);
    if (!same_signature(code, new_code)) {
        PyErr_Format(PyExc_ValueError,
                     "replacement code for %U must take the same arguments as the original",
                     code->co_qualname);
        return NULL;
    }
    PyObject *closure = function_closure(FRAME_FUNC(f));
    Py_ssize_t nclosure = closure ? PyTuple_GET_SIZE(closure) : 0;
    if (new_code->co_nfreevars != nclosure) {
        PyErr_Format(PyExc_ValueError,
                     "replacement code for %U has %d free variables but the function's closure has %zd",
                     code->co_qualname, new_code->co_nfreevars, nclosure);
        return NULL;
    }
    if (new_code->co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR)) {
        PyErr_Format(PyExc_ValueError, "replacement code for %U must not be a generator or coroutine",
                     code->co_qualname);
        return NULL;
    }
    PyObject *qualname = ((PyCodeObject *)new_code)->co_qualname;
    PyObject *func = PyFunction_NewWithQualName((PyObject *)new_code, f->f_globals, qualname);
    if (func == NULL) return NULL;
    if (closure != NULL && PyFunction_SetClosure(func, closure) < 0) {
        Py_DECREF(func);
        return NULL;
    }
    /* Rebuild the call from the argument slots: positional (incl. positional-only), then
     * keyword-only, then *args, then **kwargs, in CPython's localsplus order. */
    int argc = code->co_argcount;
    int kwonly = code->co_kwonlyargcount;
    PyObject *const *slots = f->localsplus;
    PyObject *varargs = (code->co_flags & CO_VARARGS) ? slots[argc + kwonly] : NULL;
    int kw_index = argc + kwonly + ((code->co_flags & CO_VARARGS) ? 1 : 0);
    PyObject *varkw = (code->co_flags & CO_VARKEYWORDS) ? slots[kw_index] : NULL;
    Py_ssize_t npos = argc + (varargs ? PyTuple_GET_SIZE(varargs) : 0);
    PyObject *args = PyTuple_New(npos);
    PyObject *kwargs = NULL;
    PyObject *result = NULL;
    if (args == NULL) goto done;
    for (int i = 0; i < argc; i++) {
        PyTuple_SET_ITEM(args, i, Py_NewRef(slots[i]));
    }
    for (Py_ssize_t i = argc; i < npos; i++) {
        PyTuple_SET_ITEM(args, i, Py_NewRef(PyTuple_GET_ITEM(varargs, i - argc)));
    }
    if (kwonly > 0 || (varkw != NULL && PyDict_GET_SIZE(varkw) > 0)) {
        kwargs = varkw ? PyDict_Copy(varkw) : PyDict_New();
        if (kwargs == NULL) goto done;
        for (int i = argc; i < argc + kwonly; i++) {
            PyObject *name = PyTuple_GET_ITEM(code->co_localsplusnames, i);
            if (PyDict_SetItem(kwargs, name, slots[i]) < 0) goto done;
        }
    }
    tls.skip_next = 1;
    result = PyObject_Call(func, args, kwargs);
    tls.skip_next = 0;
done:
    Py_XDECREF(args);
    Py_XDECREF(kwargs);
    Py_DECREF(func);
    return result;
}

/* The cached steady state: no function object or argument tuple to build and no frame of a
 * replacement code between the caller and the function that does the work. */
static PyObject *call_direct(ptc_frame *f, PyObject *func) {
    PyCodeObject *code = FRAME_CODE(f);
    PyCodeObject *target = (PyCodeObject *)PyFunction_GET_CODE(func);
    if (code->co_kwonlyargcount != 0 || (code->co_flags & (CO_VARARGS | CO_VARKEYWORDS)) ||
        target->co_argcount != code->co_argcount) {
        PyErr_Format(PyExc_ValueError,
                     "a function returned for %U must take exactly its positional arguments",
                     code->co_qualname);
        return NULL;
    }
    tls.skip_next = 1;
    PyObject *result = PyObject_Vectorcall(func, f->localsplus, (size_t)code->co_argcount, NULL);
    tls.skip_next = 0;
    return result;
}

#define SKIPPED_CODE_FLAGS (CO_GENERATOR | CO_COROUTINE | CO_ITERABLE_COROUTINE | CO_ASYNC_GENERATOR)

static PyObject *eval_frame(PyThreadState *tstate, struct _PyInterpreterFrame *iframe, int throwflag) {
    ptc_frame *f = (ptc_frame *)iframe;
    if (tls.callback == NULL || tls.guard > 0 || throwflag) {
        return run_default(tstate, iframe, throwflag);
    }
    if (tls.skip_next) {
        tls.skip_next = 0;
        return run_default(tstate, iframe, throwflag);
    }
#if PTC_PY313
    if (!PyCode_Check(f->f_executable)) return run_default(tstate, iframe, throwflag);
#endif
    PyCodeObject *code = FRAME_CODE(f);
    if ((code->co_flags & SKIPPED_CODE_FLAGS) || !(code->co_flags & CO_OPTIMIZED) ||
        f->f_locals != NULL || f->owner != PTC_FRAME_OWNED_BY_THREAD || f->frame_obj != NULL ||
        !frame_is_fresh(f) || code_is_skipped(code)) {
        return run_default(tstate, iframe, throwflag);
    }
    PyObject *callback = Py_NewRef(tls.callback);
    tls.guard++;
    PyObject *state = make_frame_state(f);
    PyObject *decision = state ? PyObject_CallOneArg(callback, state) : NULL;
    Py_XDECREF(state);
    tls.guard--;
    Py_DECREF(callback);
    if (decision == NULL) {
        release_frame(tstate, f);
        return NULL;
    }
    if (decision == Py_None) {
        Py_DECREF(decision);
        return run_default(tstate, iframe, throwflag);
    }
    PyObject *result = NULL;
    if (PyCode_Check(decision)) {
        result = run_replacement(f, (PyCodeObject *)decision);
    }
    else if (PyFunction_Check(decision)) {
        result = call_direct(f, decision);
    }
    else {
        PyErr_Format(PyExc_TypeError,
                     "frame callback must return None, a code object or a function, not %s",
                     Py_TYPE(decision)->tp_name);
    }
    Py_DECREF(decision);
    release_frame(tstate, f);
    return result;
}

/* ---- module functions ---- */
static PyObject *set_callback(PyObject *self, PyObject *cb) {
    if (cb != Py_None && !PyCallable_Check(cb)) {
        PyErr_SetString(PyExc_TypeError, "callback must be callable or None");
        return NULL;
    }
    PyObject *previous = tls.callback;
    if (cb == Py_None) {
        tls.callback = NULL;
        if (previous != NULL && --n_enabled_threads == 0) uninstall_hook();
    }
    else {
        tls.callback = Py_NewRef(cb);
        if (previous == NULL && n_enabled_threads++ == 0) install_hook();
    }
    if (previous == NULL) Py_RETURN_NONE;
    return previous; /* the reference the thread held */
}

static PyObject *get_callback(PyObject *self, PyObject *unused) {
    return Py_NewRef(tls.callback ? tls.callback : Py_None);
}

static PyObject *is_installed(PyObject *self, PyObject *unused) {
    return PyBool_FromLong(hook_installed);
}

static PyObject *set_skip_predicate(PyObject *self, PyObject *pred) {
    if (pred != Py_None && !PyCallable_Check(pred)) {
        PyErr_SetString(PyExc_TypeError, "predicate must be callable or None");
        return NULL;
    }
    Py_XSETREF(skip_predicate, pred == Py_None ? NULL : Py_NewRef(pred));
    Py_RETURN_NONE;
}

static int check_code(PyObject *code) {
    if (!PyCode_Check(code)) {
        PyErr_Format(PyExc_TypeError, "expected a code object, not %s", Py_TYPE(code)->tp_name);
        return 0;
    }
    return 1;
}

static PyObject *get_code_flag(PyObject *self, PyObject *code) {
    if (!check_code(code)) return NULL;
    void *flag = FLAG_UNKNOWN;
    if (ptc_get_extra(code, flag_extra_index, &flag) < 0) return NULL;
    if (flag == FLAG_SKIP) Py_RETURN_TRUE;
    if (flag == FLAG_RUN) Py_RETURN_FALSE;
    Py_RETURN_NONE;
}

static PyObject *set_code_flag(PyObject *self, PyObject *args) {
    PyObject *code, *value;
    if (!PyArg_ParseTuple(args, "OO:set_code_skip", &code, &value)) return NULL;
    if (!check_code(code)) return NULL;
    void *flag = FLAG_UNKNOWN;
    if (value != Py_None) {
        int truth = PyObject_IsTrue(value);
        if (truth < 0) return NULL;
        flag = truth ? FLAG_SKIP : FLAG_RUN;
    }
    if (ptc_set_extra(code, flag_extra_index, flag) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *get_code_extra(PyObject *self, PyObject *code) {
    if (!check_code(code)) return NULL;
    void *extra = NULL;
    if (ptc_get_extra(code, cache_extra_index, &extra) < 0) return NULL;
    return Py_NewRef(extra ? (PyObject *)extra : Py_None);
}

static PyObject *set_code_extra(PyObject *self, PyObject *args) {
    PyObject *code, *value;
    if (!PyArg_ParseTuple(args, "OO:set_code_extra", &code, &value)) return NULL;
    if (!check_code(code)) return NULL;
    void *old = NULL;
    if (ptc_get_extra(code, cache_extra_index, &old) < 0) return NULL;
    PyObject *stored = value == Py_None ? NULL : Py_NewRef(value);
    if (ptc_set_extra(code, cache_extra_index, stored) < 0) {
        Py_XDECREF(stored);
        return NULL;
    }
    Py_XDECREF((PyObject *)old);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"set_callback", set_callback, METH_O,
     "Set this thread's frame callback (None disables); return the previous one."},
    {"get_callback", get_callback, METH_NOARGS, "Return this thread's frame callback or None."},
    {"is_installed", is_installed, METH_NOARGS,
     "Return True while the eval-frame function is installed on the interpreter."},
    {"set_skip_predicate", set_skip_predicate, METH_O,
     "Set predicate(code) -> bool deciding once per code object whether its frames are skipped."},
    {"get_code_skip", get_code_flag, METH_O,
     "Return True (skipped), False (hooked) or None (not decided yet) for a code object."},
    {"set_code_skip", set_code_flag, METH_VARARGS,
     "Force (True/False) or forget (None) the skip decision for a code object."},
    {"get_code_extra", get_code_extra, METH_O, "Return the object stored on a code object or None."},
    {"set_code_extra", set_code_extra, METH_VARARGS,
     "Store an object on a code object (None clears); it is released when the code dies."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_framehook", "PEP 523 frame hook of ptc_capture.", -1, methods,
};

PyMODINIT_FUNC PyInit__framehook(void) {
    if (PyType_Ready(&FrameStateType) < 0) return NULL;
    if (cache_extra_index < 0) {
        cache_extra_index = ptc_request_extra(free_cache_extra);
        flag_extra_index = ptc_request_extra(free_flag_extra);
        if (cache_extra_index < 0 || flag_extra_index < 0) {
            PyErr_SetString(PyExc_RuntimeError, "no free co_extra index for ptc_capture");
            return NULL;
        }
    }
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "FrameState", (PyObject *)&FrameStateType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
