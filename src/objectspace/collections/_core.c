/*
 * objectspace.collections._core: the fields and hot methods of the persisted types, in C.
 *
 * The pure-Python twin of this module is objectspace/collections/_pycore.py: the same six
 * classes, fields, methods, exceptions and dirty-tracking effects. Keep the two in step.
 * objectspace/collections/_impl.py chooses between them at import.
 *
 *   ObjectBase  the fields every persisted object shares (_id, _space, _dirty, _meta, ...)
 *   ValueBase   + _value; the `value` property
 *   ArrayBase   + _data (a list); len, a[i], a[i] = x, iter
 *   ListBase    + _data (a list), _from; len, l[i], append
 *   QueueBase   + _data (a deque), _head; len, enqueue, dequeue, peek
 *   StackBase   + _data (a list); len, push, pop, peek
 *
 * Every field is an object slot (a T_OBJECT_EX member), read and written by name from
 * Python exactly like a __slots__ entry, except the four bools of ObjectBase, which are
 * bits of one C int behind getset descriptors of the same names (a bool each, as a slot
 * would hold): the save path (_emit, _freeze, _current_page ...) stays in Python and reads
 * them by name. Each type lists its fields in __slots__ (in its __dict__), so
 * copyreg._slotnames and code that walks __slots__ along the MRO see them. _dirty is None
 * until the first edit of a page, which makes the set.
 * The first edit of a page calls the Python method _touch().
 *
 * Objects pickle as (copyreg.__newobj__, (cls,), (dict or None, {slot: value})), the format
 * the default reduction gives the pure-Python classes.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <datetime.h>

/* -- module state (single-phase init: one interpreter) ------------------------------------- */

static PyObject *str_touch;        /* "_touch" */
static PyObject *str_value;        /* "value" */
static PyObject *str_add;          /* "add" */
static PyObject *str_append;       /* "append" */
static PyObject *str_popleft;      /* "popleft" */
static PyObject *str_pop;          /* "pop" */
static PyObject *str_getstate;     /* "__getstate__" */
static PyObject *str_dict;         /* "__dict__" */
static PyObject *str_delitem;      /* "__delitem__" */
static PyObject *str_maxes;        /* "_maxes" */
static PyObject *str_changes;      /* "changes" */
static PyObject *str_dumps;        /* "dumps" */
static PyObject *str_rows;         /* "rows" */
static PyObject *str_truncated;    /* "truncated" */
static PyObject *str_new;          /* "new" */
static PyObject *str_meta;         /* "meta" */
static PyObject *str_lists;        /* "_lists" */
static PyObject *str_load;         /* "_load" */
static PyObject *str_index;        /* "_index" */
static PyObject *str_len;          /* "_len" */
static PyObject *str_expand;       /* "_expand" */
static PyObject *str_data;         /* "_data" */
static PyObject *str_set;          /* "_set" */
static PyObject *str_list;         /* "_list" */
static PyObject *str_spell;        /* "_spell" */
static PyObject *str_rewrite_all;  /* "_rewrite_all" */
static PyObject *int_zero;         /* 0 */
static PyObject *int_one;          /* 1 */
static PyObject *int_minus_one;    /* -1 */
static PyObject *copyreg_newobj;   /* copyreg.__newobj__ */
static PyObject *copyreg_slotnames;/* copyreg._slotnames */
static PyTypeObject *deque_type;   /* collections.deque */

/* METH_FASTCALL's signature (spelled out: its public name changed across versions) */
typedef PyObject *(*fastcall_fn)(PyObject *, PyObject *const *, Py_ssize_t);

/* A builtin method called through its C function (after an exact type check). */
typedef struct {
    PyObject *descr;
    PyCFunction meth;
    int flags; /* METH_O, METH_NOARGS or METH_FASTCALL; 0: call descr */
} FastMethod;

static FastMethod deque_append, deque_popleft, list_pop;

static int
fast_method_init(FastMethod *m, PyTypeObject *type, const char *name)
{
    m->descr = PyObject_GetAttrString((PyObject *)type, name);
    if (m->descr == NULL) {
        return -1;
    }
    m->meth = NULL;
    m->flags = 0;
    if (Py_IS_TYPE(m->descr, &PyMethodDescr_Type)) {
        PyMethodDef *def = ((PyMethodDescrObject *)m->descr)->d_method;
        int flags = def->ml_flags & ~METH_COEXIST;
        if (flags == METH_O || flags == METH_NOARGS || flags == METH_FASTCALL) {
            m->meth = def->ml_meth;
            m->flags = flags;
        }
    }
    return 0;
}

/* m(self) */
static PyObject *
fast_call0(FastMethod *m, PyObject *self)
{
    switch (m->flags) {
    case METH_NOARGS:
        return m->meth(self, NULL);
    case METH_FASTCALL:
        return ((fastcall_fn)(void (*)(void))m->meth)(self, NULL, 0);
    default:
        return PyObject_Vectorcall(m->descr, &self, 1, NULL);
    }
}

/* m(self, arg) */
static PyObject *
fast_call1(FastMethod *m, PyObject *self, PyObject *arg)
{
    switch (m->flags) {
    case METH_O:
        return m->meth(self, arg);
    case METH_FASTCALL:
        return ((fastcall_fn)(void (*)(void))m->meth)(self, &arg, 1);
    default: {
        PyObject *args[2] = {self, arg};
        return PyObject_Vectorcall(m->descr, args, 2, NULL);
    }
    }
}

/* -- ObjectBase ---------------------------------------------------------------------------- */

/*
 * The four bool fields (_registered, _meta, _cleared, _new) are bits of one C int, read and
 * written through getset descriptors of those names; each has a second bit saying that it
 * was set, so that reading one never set raises AttributeError like an unset slot.
 */
enum {
    F_REGISTERED = 1 << 0,
    F_META = 1 << 1,
    F_CLEARED = 1 << 2,
    F_NEW = 1 << 3,
};
#define F_SET(bit) ((bit) << 4) /* the field was set */

typedef struct {
    PyObject_HEAD
    PyObject *dirty; /* None until the first edit of a page, then a set */
    PyObject *id;
    PyObject *pending;
    PyObject *space;
    unsigned int flags; /* F_* bits, and their F_SET bits */
} BaseObject;

/* The error reading an unset field raises (the member descriptor's own); always -1. */
static int
missing(PyObject *self, const char *name)
{
    PyObject *value = PyObject_GetAttrString(self, name);
    if (value != NULL) {
        Py_DECREF(value);
        PyErr_Format(PyExc_AttributeError, "'%.200s' object has no attribute '%s'",
                     Py_TYPE(self)->tp_name, name);
    }
    return -1;
}

#define FIELD_OR_FAIL(var, self, field, name, fail)         \
    do {                                                    \
        (var) = (self)->field;                              \
        if ((var) == NULL) {                                \
            missing((PyObject *)(self), (name));            \
            fail;                                           \
        }                                                   \
    } while (0)

static int touch_slow(BaseObject *self);

/* `if not self._registered: self._touch()` */
static inline int
touch(BaseObject *self)
{
    return (self->flags & F_REGISTERED) ? 0 : touch_slow(self);
}

static int
touch_slow(BaseObject *self)
{
    if (!(self->flags & F_SET(F_REGISTERED))) {
        return missing((PyObject *)self, "_registered");
    }
    PyObject *result = PyObject_CallMethodNoArgs((PyObject *)self, str_touch);
    if (result == NULL) {
        return -1;
    }
    Py_DECREF(result);
    return 0;
}

/* `self.<flag field> = True` */
static inline void
set_flag(BaseObject *self, unsigned int bit)
{
    self->flags |= bit | F_SET(bit);
}

/* A new empty set that the cyclic collector does not track: an object's dirty slots (its
   keys, indices, elements), which cannot refer back to the set, never the object's data.
   Such a set lives for one checkpoint interval; tracked, the young collections of the
   interval promoted every one of them and set off full collections that walk the whole
   state. Freed by reference counting like any set. */
static PyObject *
untracked_set(void)
{
    PyObject *set = PySet_New(NULL);
    if (set != NULL && PyObject_GC_IsTracked(set)) {
        PyObject_GC_UnTrack(set);
    }
    return set;
}

/* `self._dirty.add(key)`, the set made first if `self._dirty` is None */
static int
dirty_add(BaseObject *self, PyObject *key)
{
    PyObject *dirty;
    FIELD_OR_FAIL(dirty, self, dirty, "_dirty", return -1);
    if (dirty == Py_None) {
        dirty = untracked_set();
        if (dirty == NULL) {
            return -1;
        }
        Py_SETREF(self->dirty, dirty);
    }
    Py_INCREF(dirty);
    int rc;
    if (PySet_CheckExact(dirty)) {
        rc = PySet_Add(dirty, key);
    }
    else {
        PyObject *result = PyObject_CallMethodOneArg(dirty, str_add, key);
        rc = result == NULL ? -1 : 0;
        Py_XDECREF(result);
    }
    Py_DECREF(dirty);
    return rc;
}

/* -- slot indexes as shared int objects ---------------------------------------------------
 *
 * The dirty sets hold slot indexes (and queue positions) as ints. The ints below
 * INDEX_CACHE_LIMIT are made once, on first use, and shared: every dirty set, page and queue
 * head holding index n holds the same object, instead of allocating one per edit and per
 * page. The cache lives as long as the process and holds at most INDEX_CACHE_LIMIT ints
 * (40 bytes each with their pointer: 10 MB), only as many as the largest index used.
 */

#define INDEX_CACHE_LIMIT ((Py_ssize_t)1 << 18)

static PyObject **index_cache;     /* index_cache[n]: the int n, or NULL */
static Py_ssize_t index_cache_size;

static PyObject *
index_int_slow(Py_ssize_t n)
{
    if (n < 0 || n >= INDEX_CACHE_LIMIT) {
        return PyLong_FromSsize_t(n);
    }
    if (n >= index_cache_size) {
        Py_ssize_t size = index_cache_size > 0 ? index_cache_size : 1024;
        while (size <= n) {
            size *= 2;
        }
        PyObject **grown = PyMem_Realloc(index_cache, (size_t)size * sizeof(PyObject *));
        if (grown == NULL) {
            return PyLong_FromSsize_t(n); /* no room to cache: an int of its own */
        }
        memset(grown + index_cache_size, 0,
               (size_t)(size - index_cache_size) * sizeof(PyObject *));
        index_cache = grown;
        index_cache_size = size;
    }
    PyObject *key = PyLong_FromSsize_t(n);
    if (key == NULL) {
        return NULL;
    }
    index_cache[n] = Py_NewRef(key);
    return key;
}

/* the int n (a new reference) */
static inline PyObject *
index_int(Py_ssize_t n)
{
    if ((size_t)n < (size_t)index_cache_size && index_cache[n] != NULL) {
        return Py_NewRef(index_cache[n]);
    }
    return index_int_slow(n);
}

/* `self._dirty.add(n)` */
static int
dirty_add_ssize(BaseObject *self, Py_ssize_t n)
{
    PyObject *key = index_int(n);
    if (key == NULL) {
        return -1;
    }
    int rc = dirty_add(self, key);
    Py_DECREF(key);
    return rc;
}

/* `len(data)`, -1 on error */
static inline Py_ssize_t
length_of(PyObject *data)
{
    if (PyList_CheckExact(data)) {
        return PyList_GET_SIZE(data);
    }
    if (Py_IS_TYPE(data, deque_type)) {
        return Py_SIZE(data);
    }
    Py_INCREF(data);
    Py_ssize_t n = PyObject_Size(data);
    Py_DECREF(data);
    return n;
}

/* `not data`: 1 if empty, 0 if not, -1 on error */
static inline int
is_empty(PyObject *data)
{
    if (PyList_CheckExact(data)) {
        return PyList_GET_SIZE(data) == 0;
    }
    if (Py_IS_TYPE(data, deque_type)) {
        return Py_SIZE(data) == 0;
    }
    Py_INCREF(data);
    int truth = PyObject_IsTrue(data);
    Py_DECREF(data);
    return truth < 0 ? -1 : !truth;
}

/* raise IndexError(f"{prefix} {self._id!r}"); returns NULL */
static PyObject *
empty_error(BaseObject *self, const char *prefix)
{
    PyObject *id;
    FIELD_OR_FAIL(id, self, id, "_id", return NULL);
    Py_INCREF(id);
    PyObject *message = PyUnicode_FromFormat("%s %R", prefix, id);
    Py_DECREF(id);
    if (message != NULL) {
        PyErr_SetObject(PyExc_IndexError, message);
        Py_DECREF(message);
    }
    return NULL;
}

static int
base_traverse(BaseObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->dirty);
    Py_VISIT(self->id);
    Py_VISIT(self->pending);
    Py_VISIT(self->space);
    return 0;
}

static int
base_clear(BaseObject *self)
{
    Py_CLEAR(self->dirty);
    Py_CLEAR(self->id);
    Py_CLEAR(self->pending);
    Py_CLEAR(self->space);
    return 0;
}

static void
base_dealloc(BaseObject *self)
{
    PyObject_GC_UnTrack(self);
    base_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* (None or a copy of __dict__, {slot name: value} for every slot that is set) */
static PyObject *
base_getstate(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *state = NULL, *slots = NULL, *names = NULL, *result = NULL;

    if (Py_TYPE(self)->tp_dictoffset != 0) {
        PyObject *dict = PyObject_GetAttr(self, str_dict);
        if (dict == NULL) {
            goto done;
        }
        if (PyDict_Check(dict) && PyDict_GET_SIZE(dict) > 0) {
            state = PyDict_Copy(dict);
            Py_DECREF(dict);
            if (state == NULL) {
                goto done;
            }
        }
        else {
            Py_DECREF(dict);
        }
    }
    if (state == NULL) {
        state = Py_NewRef(Py_None);
    }
    slots = PyDict_New();
    if (slots == NULL) {
        goto done;
    }
    names = PyObject_CallOneArg(copyreg_slotnames, (PyObject *)Py_TYPE(self));
    if (names == NULL) {
        goto done;
    }
    if (!PyList_Check(names)) {
        PyErr_SetString(PyExc_TypeError, "copyreg._slotnames should return a list");
        goto done;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(names); i++) {
        PyObject *name = PyList_GET_ITEM(names, i);
        PyObject *value = PyObject_GetAttr(self, name);
        if (value == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_AttributeError)) {
                goto done;
            }
            PyErr_Clear(); /* an unset slot */
        }
        else {
            int rc = PyDict_SetItem(slots, name, value);
            Py_DECREF(value);
            if (rc < 0) {
                goto done;
            }
        }
    }
    result = PyTuple_Pack(2, state, slots);
done:
    Py_XDECREF(state);
    Py_XDECREF(slots);
    Py_XDECREF(names);
    return result;
}

static int
set_attributes(PyObject *self, PyObject *mapping)
{
    if (!PyDict_Check(mapping)) {
        PyErr_SetString(PyExc_TypeError, "the state of a persisted object is a dict of slots");
        return -1;
    }
    PyObject *items = PyDict_Items(mapping);
    if (items == NULL) {
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items); i++) {
        PyObject *item = PyList_GET_ITEM(items, i);
        if (PyObject_SetAttr(self, PyTuple_GET_ITEM(item, 0), PyTuple_GET_ITEM(item, 1)) < 0) {
            Py_DECREF(items);
            return -1;
        }
    }
    Py_DECREF(items);
    return 0;
}

/* The inverse of __getstate__ (and what pickle does for objects without __setstate__). */
static PyObject *
base_setstate(PyObject *self, PyObject *state)
{
    PyObject *slots = NULL;
    if (PyTuple_Check(state) && PyTuple_GET_SIZE(state) == 2) {
        slots = PyTuple_GET_ITEM(state, 1);
        state = PyTuple_GET_ITEM(state, 0);
    }
    Py_INCREF(state);
    Py_XINCREF(slots);
    int rc = 0;
    if (state != Py_None) {
        if (Py_TYPE(self)->tp_dictoffset != 0 && PyDict_Check(state)) {
            PyObject *dict = PyObject_GetAttr(self, str_dict);
            rc = dict == NULL ? -1 : PyDict_Update(dict, state);
            Py_XDECREF(dict);
        }
        else {
            rc = set_attributes(self, state);
        }
    }
    if (rc == 0 && slots != NULL && slots != Py_None) {
        rc = set_attributes(self, slots);
    }
    Py_DECREF(state);
    Py_XDECREF(slots);
    if (rc < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* (copyreg.__newobj__, (type(self),), self.__getstate__()), for every pickle protocol */
static PyObject *
base_reduce(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *state = PyObject_CallMethodNoArgs(self, str_getstate);
    if (state == NULL) {
        return NULL;
    }
    return Py_BuildValue("O(O)N", copyreg_newobj, (PyObject *)Py_TYPE(self), state);
}

static PyMethodDef base_methods[] = {
    {"__getstate__", base_getstate, METH_NOARGS,
     "__getstate__($self, /)\n--\n\n"
     "(None, {slot: value}) for every slot that is set (a copy of __dict__ first, if any)."},
    {"__setstate__", base_setstate, METH_O,
     "__setstate__($self, state, /)\n--\n\nSet the slots from __getstate__'s result."},
    {"__reduce__", base_reduce, METH_NOARGS,
     "__reduce__($self, /)\n--\n\n(copyreg.__newobj__, (type(self),), self.__getstate__())."},
    {NULL}};

#define MEMBER(name, type, field) {name, T_OBJECT_EX, offsetof(type, field), 0, NULL}

static PyMemberDef base_members[] = {
    MEMBER("_dirty", BaseObject, dirty),
    MEMBER("_id", BaseObject, id),
    MEMBER("_pending", BaseObject, pending),
    MEMBER("_space", BaseObject, space),
    {NULL}};

/* -- the flag fields: a bool each, in BaseObject.flags -- */

typedef struct {
    unsigned int bit;
    const char *name;
} FlagField;

static FlagField flag_registered = {F_REGISTERED, "_registered"};
static FlagField flag_meta = {F_META, "_meta"};
static FlagField flag_cleared = {F_CLEARED, "_cleared"};
static FlagField flag_new = {F_NEW, "_new"};

static PyObject *
flag_get(BaseObject *self, void *closure)
{
    FlagField *field = (FlagField *)closure;
    if (!(self->flags & F_SET(field->bit))) {
        PyErr_Format(PyExc_AttributeError, "'%.200s' object has no attribute '%s'",
                     Py_TYPE(self)->tp_name, field->name);
        return NULL;
    }
    return PyBool_FromLong((self->flags & field->bit) != 0);
}

/* Stores the value's truth; deleting unsets the field, as for a slot. */
static int
flag_set(BaseObject *self, PyObject *value, void *closure)
{
    FlagField *field = (FlagField *)closure;
    if (value == NULL) {
        if (!(self->flags & F_SET(field->bit))) {
            PyErr_Format(PyExc_AttributeError, "'%.200s' object has no attribute '%s'",
                         Py_TYPE(self)->tp_name, field->name);
            return -1;
        }
        self->flags &= ~(field->bit | F_SET(field->bit));
        return 0;
    }
    int truth = value == Py_True ? 1 : value == Py_False ? 0 : PyObject_IsTrue(value);
    if (truth < 0) {
        return -1;
    }
    self->flags = (self->flags & ~field->bit) | F_SET(field->bit) | (truth ? field->bit : 0);
    return 0;
}

static PyGetSetDef base_getset[] = {
    {"_cleared", (getter)flag_get, (setter)flag_set, NULL, &flag_cleared},
    {"_meta", (getter)flag_get, (setter)flag_set, NULL, &flag_meta},
    {"_new", (getter)flag_get, (setter)flag_set, NULL, &flag_new},
    {"_registered", (getter)flag_get, (setter)flag_set, NULL, &flag_registered},
    {NULL}};

#define TYPE_FLAGS (Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC)

static PyTypeObject ObjectBase_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "objectspace.collections._core.ObjectBase",
    .tp_doc = "The fields of every persisted object (set by PersistedObject.__init__).",
    .tp_basicsize = sizeof(BaseObject),
    .tp_flags = TYPE_FLAGS,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)base_dealloc,
    .tp_traverse = (traverseproc)base_traverse,
    .tp_clear = (inquiry)base_clear,
    .tp_free = PyObject_GC_Del,
    .tp_methods = base_methods,
    .tp_members = base_members,
    .tp_getset = base_getset,
};

/* -- ValueBase ----------------------------------------------------------------------------- */

typedef struct {
    BaseObject base;
    PyObject *value;
} ValueObject;

static int
value_traverse(ValueObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->value);
    return base_traverse(&self->base, visit, arg);
}

static int
value_clear(ValueObject *self)
{
    Py_CLEAR(self->value);
    return base_clear(&self->base);
}

static void
value_dealloc(ValueObject *self)
{
    PyObject_GC_UnTrack(self);
    value_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
value_get(ValueObject *self, void *Py_UNUSED(closure))
{
    PyObject *value;
    FIELD_OR_FAIL(value, self, value, "_value", return NULL);
    return Py_NewRef(value);
}

static int
value_set(ValueObject *self, PyObject *value, void *Py_UNUSED(closure))
{
    if (value == NULL) {
        PyObject *qualname = PyType_GetQualName(Py_TYPE(self));
        if (qualname != NULL) {
            PyErr_Format(PyExc_AttributeError, "property 'value' of %R object has no deleter",
                         qualname);
            Py_DECREF(qualname);
        }
        return -1;
    }
    if (touch(&self->base) < 0) {
        return -1;
    }
    Py_XSETREF(self->value, Py_NewRef(value));
    set_flag(&self->base, F_META);
    return 0;
}

/*
 * `v.value = x` goes through the type's tp_setattro: generic attribute assignment looks the
 * name up along the MRO and calls the descriptor found. This one calls value_set directly
 * when the name is "value" and the type's "value" is ValueBase's descriptor (a subclass
 * may override it). The last type checked is remembered with its version tag, which
 * changes whenever the type or a base is modified; the generic path does the rest.
 */
static PyObject *value_descr;           /* ValueBase.__dict__["value"] */
static PyTypeObject *value_checked_type; /* its "value" is value_descr, as of ... */
static unsigned int value_checked_version; /* ... this version tag (0: none) */

static int
value_setattro(PyObject *self, PyObject *name, PyObject *value)
{
    if (name == str_value && value != NULL) {
        PyTypeObject *type = Py_TYPE(self);
        if (type == value_checked_type && type->tp_version_tag == value_checked_version &&
            value_checked_version != 0) {
            return value_set((ValueObject *)self, value, NULL);
        }
        if (_PyType_Lookup(type, name) == value_descr) {
            if (type->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) {
                value_checked_type = type;
                value_checked_version = type->tp_version_tag;
            }
            return value_set((ValueObject *)self, value, NULL);
        }
    }
    return PyObject_GenericSetAttr(self, name, value);
}

/*
 * PersistedValue._save and _freeze (see objectspace.collections.value): what a save does
 * once per set value, without a Python frame. value_setup gives the four shared pages
 * ([new][meta]) and the TableChanges type; until then _save_value raises.
 */
static PyObject *value_pages;         /* ((page, page), (page, page)): [new][meta] */
static PyTypeObject *value_changes;   /* objectspace.tables.TableChanges (slots) */
static PyObject *value_key;           /* b"value": the row's key */

static PyObject *
core_value_setup(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyTuple_Check(args[0]) || PyTuple_GET_SIZE(args[0]) != 2 ||
        !PyType_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "value_setup(pages, TableChanges)");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < 2; i++) {
        PyObject *row = PyTuple_GET_ITEM(args[0], i);
        if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) != 2) {
            PyErr_SetString(PyExc_TypeError, "value_setup: pages must be 2 x 2 tuples");
            return NULL;
        }
    }
    if (value_key == NULL && (value_key = PyBytes_FromString("value")) == NULL) {
        return NULL;
    }
    Py_XSETREF(value_pages, Py_NewRef(args[0]));
    Py_XSETREF(value_changes, (PyTypeObject *)Py_NewRef(args[1]));
    Py_RETURN_NONE;
}

/* `page.<name>` as a truth value (-1: error) */
static int
page_flag(PyObject *page, PyObject *name)
{
    PyObject *flag = PyObject_GetAttr(page, name);
    if (flag == NULL) {
        return -1;
    }
    int truth = flag == Py_True ? 1 : flag == Py_False ? 0 : PyObject_IsTrue(flag);
    Py_DECREF(flag);
    return truth;
}

/* out.changes[name], created (an untracked TableChanges) when absent; a new reference */
static PyObject *
emitter_changes(PyObject *out, PyObject *name)
{
    PyObject *changes_map = PyObject_GetAttr(out, str_changes);
    if (changes_map == NULL) {
        return NULL;
    }
    if (!PyDict_Check(changes_map)) {
        PyErr_SetString(PyExc_TypeError, "an emitter's changes must be a dict");
        Py_DECREF(changes_map);
        return NULL;
    }
    PyObject *changes = PyDict_GetItemWithError(changes_map, name);
    if (changes != NULL) {
        Py_INCREF(changes);
    } else if (!PyErr_Occurred()) {
        PyObject *rows = PyDict_New();
        changes = rows == NULL ? NULL : value_changes->tp_alloc(value_changes, 0);
        if (changes == NULL || PyObject_SetAttr(changes, str_truncated, Py_False) < 0 ||
            PyObject_SetAttr(changes, str_rows, rows) < 0 ||
            PyDict_SetItem(changes_map, name, changes) < 0) {
            Py_CLEAR(changes);
        } else if (PyObject_GC_IsTracked(changes)) {
            PyObject_GC_UnTrack(changes); /* a bool and a dict of bytes: in no cycle */
        }
        Py_XDECREF(rows);
    }
    Py_DECREF(changes_map);
    return changes;
}

static PyObject *
value_save(ValueObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "_save takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    if (value_pages == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "value_setup was not called");
        return NULL;
    }
    PyObject *out = args[0];
    int full = PyObject_IsTrue(args[1]);
    if (full < 0) {
        return NULL;
    }
    unsigned int flags = self->base.flags;
    if (!(flags & F_SET(F_NEW))) {
        missing((PyObject *)self, "_new");
        return NULL;
    }
    if (!(flags & F_SET(F_META))) {
        missing((PyObject *)self, "_meta");
        return NULL;
    }
    int new = (flags & F_NEW) != 0, meta = (flags & F_META) != 0;
    PyObject *pending;
    FIELD_OR_FAIL(pending, &self->base, pending, "_pending", return NULL);
    if (pending != Py_None) {
        if (!new && (new = page_flag(pending, str_new)) < 0) {
            return NULL;
        }
        if (!meta && (meta = page_flag(pending, str_meta)) < 0) {
            return NULL;
        }
    }
    if (full || new || meta) {
        PyObject *id, *value, *name, *changes, *rows = NULL, *dumps = NULL, *raw = NULL;
        FIELD_OR_FAIL(id, &self->base, id, "_id", return NULL);
        FIELD_OR_FAIL(value, self, value, "_value", return NULL);
        name = PyUnicode_FromFormat("state/item/%S/items", id);
        if (name == NULL) {
            return NULL;
        }
        changes = emitter_changes(out, name);
        Py_DECREF(name);
        if (changes == NULL) {
            return NULL;
        }
        Py_INCREF(value); /* dumps may run code that replaces it */
        int status = -1;
        if ((rows = PyObject_GetAttr(changes, str_rows)) != NULL &&
            (dumps = PyObject_GetAttr(out, str_dumps)) != NULL &&
            (raw = PyObject_CallOneArg(dumps, value)) != NULL) {
            status = PyDict_SetItem(rows, value_key, raw);
        }
        Py_DECREF(value);
        Py_XDECREF(raw);
        Py_XDECREF(dumps);
        Py_XDECREF(rows);
        Py_DECREF(changes);
        if (status < 0) {
            return NULL;
        }
    }
    return Py_NewRef(PyTuple_GET_ITEM(PyTuple_GET_ITEM(value_pages, new), meta));
}

static PyObject *
value_freeze(ValueObject *self, PyObject *page)
{
    Py_XSETREF(self->base.pending, Py_NewRef(page));
    unsigned int cleared = F_REGISTERED | F_META | F_NEW;
    self->base.flags = (self->base.flags & ~cleared) | F_SET(F_REGISTERED) | F_SET(F_META) |
                       F_SET(F_NEW);
    Py_RETURN_NONE;
}

static PyMethodDef value_methods[] = {
    {"_save_value", (PyCFunction)(void (*)(void))value_save, METH_FASTCALL,
     "_save_value($self, out, full, /)\n--\n\n"
     "PersistedValue._save: the value's row into out when full, new or set; its page."},
    {"_freeze_value", (PyCFunction)value_freeze, METH_O,
     "_freeze_value($self, page, /)\n--\n\n"
     "PersistedValue._freeze: keep page until acknowledged, start an empty page."},
    {NULL}};

static PyGetSetDef value_getset[] = {
    {"value", (getter)value_get, (setter)value_set, "The current value.", NULL},
    {NULL}};

static PyMemberDef value_members[] = {MEMBER("_value", ValueObject, value), {NULL}};

static PyTypeObject ValueBase_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "objectspace.collections._core.ValueBase",
    .tp_doc = "The field and accessor of a persisted value.",
    .tp_basicsize = sizeof(ValueObject),
    .tp_flags = TYPE_FLAGS,
    .tp_base = &ObjectBase_Type,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)value_dealloc,
    .tp_traverse = (traverseproc)value_traverse,
    .tp_clear = (inquiry)value_clear,
    .tp_free = PyObject_GC_Del,
    .tp_members = value_members,
    .tp_methods = value_methods,
    .tp_getset = value_getset,
    .tp_setattro = value_setattro,
};

/* -- the kinds holding their values in _data: ArrayBase, ListBase, StackBase ------------------ */

typedef struct {
    BaseObject base;
    PyObject *data;
} DataObject;

static int
data_traverse(DataObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->data);
    return base_traverse(&self->base, visit, arg);
}

static int
data_clear(DataObject *self)
{
    Py_CLEAR(self->data);
    return base_clear(&self->base);
}

static void
data_dealloc(DataObject *self)
{
    PyObject_GC_UnTrack(self);
    data_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef data_members[] = {MEMBER("_data", DataObject, data), {NULL}};

/* `len(self._data)` */
static Py_ssize_t
data_length(DataObject *self)
{
    PyObject *data;
    FIELD_OR_FAIL(data, self, data, "_data", return -1);
    return length_of(data);
}

/* -- ArrayBase ----------------------------------------------------------------------------- */

/* raise IndexError(f"array {self._id!r} index {index} out of range (length {len(data)})") */
static void
array_index_error(BaseObject *self, PyObject *index, PyObject *data)
{
    PyObject *id_repr = NULL, *index_text = NULL, *message = NULL, *exc = NULL;
    Py_ssize_t n;
    if (self->id == NULL) {
        missing((PyObject *)self, "_id");
        return;
    }
    id_repr = PyObject_Repr(self->id);
    if (id_repr == NULL) {
        goto done;
    }
    index_text = PyObject_Format(index, NULL);
    if (index_text == NULL) {
        goto done;
    }
    n = length_of(data);
    if (n < 0) {
        goto done;
    }
    message = PyUnicode_FromFormat("array %U index %U out of range (length %zd)", id_repr,
                                   index_text, n);
    if (message == NULL) {
        goto done;
    }
    exc = PyObject_CallOneArg(PyExc_IndexError, message);
    if (exc == NULL) {
        goto done;
    }
    PyException_SetCause(exc, NULL); /* `from None` */
    PyErr_SetObject(PyExc_IndexError, exc);
done:
    Py_XDECREF(id_repr);
    Py_XDECREF(index_text);
    Py_XDECREF(message);
    Py_XDECREF(exc);
}

/* `self._data[index]`, an out-of-range int index raising the array's IndexError */
static PyObject *
array_subscript(DataObject *self, PyObject *index)
{
    PyObject *data, *item;
    FIELD_OR_FAIL(data, self, data, "_data", return NULL);
    if (PyLong_CheckExact(index) && PyList_CheckExact(data)) {
        Py_ssize_t i = PyLong_AsSsize_t(index);
        if (i != -1 || !PyErr_Occurred()) {
            Py_ssize_t n = PyList_GET_SIZE(data);
            if (i < 0) {
                i += n;
            }
            if (i >= 0 && i < n) {
                return Py_NewRef(PyList_GET_ITEM(data, i));
            }
            array_index_error(&self->base, index, data);
            return NULL;
        }
        PyErr_Clear(); /* too large: the list raises IndexError */
    }
    if (PySlice_Check(index)) {
        Py_INCREF(data);
        item = PyObject_GetItem(data, index);
        Py_DECREF(data);
        return item;
    }
    Py_INCREF(data);
    item = PyObject_GetItem(data, index);
    Py_DECREF(data);
    if (item == NULL && PyErr_ExceptionMatches(PyExc_IndexError)) {
        PyErr_Clear();
        FIELD_OR_FAIL(data, self, data, "_data", return NULL);
        Py_INCREF(data);
        array_index_error(&self->base, index, data);
        Py_DECREF(data);
    }
    return item;
}

static int
array_ass_subscript(DataObject *self, PyObject *index, PyObject *value)
{
    PyObject *idx = NULL, *data = NULL, *key = NULL;
    int rc = -1;

    if (value == NULL) { /* no __delitem__: del a[i] fails as on a class without one */
        PyErr_SetObject(PyExc_AttributeError, str_delitem);
        return -1;
    }
    if (touch(&self->base) < 0) {
        return -1;
    }
    if (PyLong_CheckExact(index)) {
        idx = Py_NewRef(index);
    }
    else if (PyLong_Check(index)) {
        idx = PyNumber_Long(index); /* `int(index)` */
        if (idx == NULL) {
            return -1;
        }
    }
    else if (!PySlice_Check(index) && Py_TYPE(index)->tp_as_number != NULL &&
             Py_TYPE(index)->tp_as_number->nb_index != NULL) {
        idx = PyNumber_Index(index); /* `operator.index(index)`, as a list takes it */
        if (idx == NULL) {
            return -1;
        }
    }
    else {
        PyObject *id, *name;
        FIELD_OR_FAIL(id, &self->base, id, "_id", return -1);
        Py_INCREF(id);
        name = PyType_GetName(Py_TYPE(index));
        if (name != NULL) {
            PyErr_Format(PyExc_TypeError, "array %R indices are ints, not %U", id, name);
            Py_DECREF(name);
        }
        Py_DECREF(id);
        return -1;
    }
    FIELD_OR_FAIL(data, self, data, "_data", goto done);
    Py_INCREF(data);
    if (PyList_CheckExact(data)) {
        Py_ssize_t i = PyLong_AsSsize_t(idx);
        if (i != -1 || !PyErr_Occurred()) {
            Py_ssize_t n = PyList_GET_SIZE(data);
            Py_ssize_t j = i < 0 ? i + n : i;
            if (j < 0 || j >= n) {
                array_index_error(&self->base, idx, data);
                goto done;
            }
            PyObject *old = PyList_GET_ITEM(data, j);
            PyList_SET_ITEM(data, j, Py_NewRef(value));
            Py_DECREF(old);
            /* `index if index >= 0 else index + len(data)`, as the shared int */
            key = index_int(i >= 0 ? i : i + length_of(data));
            if (key == NULL) {
                goto done;
            }
            rc = dirty_add(&self->base, key);
            goto done;
        }
        PyErr_Clear(); /* too large: the list raises IndexError */
    }
    if (PyObject_SetItem(data, idx, value) < 0) {
        if (PyErr_ExceptionMatches(PyExc_IndexError)) {
            PyErr_Clear();
            array_index_error(&self->base, idx, data);
        }
        goto done;
    }
    /* `index if index >= 0 else index + len(data)` */
    int non_negative = PyObject_RichCompareBool(idx, int_zero, Py_GE);
    if (non_negative < 0) {
        goto done;
    }
    if (non_negative) {
        key = Py_NewRef(idx);
    }
    else {
        Py_ssize_t n = length_of(data);
        if (n < 0) {
            goto done;
        }
        PyObject *length = PyLong_FromSsize_t(n);
        if (length == NULL) {
            goto done;
        }
        key = PyNumber_Add(idx, length);
        Py_DECREF(length);
        if (key == NULL) {
            goto done;
        }
    }
    rc = dirty_add(&self->base, key);
done:
    Py_XDECREF(idx);
    Py_XDECREF(data);
    Py_XDECREF(key);
    return rc;
}

static PyObject *
array_iter(DataObject *self)
{
    PyObject *data;
    FIELD_OR_FAIL(data, self, data, "_data", return NULL);
    return PyObject_GetIter(data);
}

static PyMappingMethods array_as_mapping = {
    .mp_length = (lenfunc)data_length,
    .mp_subscript = (binaryfunc)array_subscript,
    .mp_ass_subscript = (objobjargproc)array_ass_subscript,
};

static PySequenceMethods array_as_sequence = {
    .sq_length = (lenfunc)data_length,
};

static PyTypeObject ArrayBase_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "objectspace.collections._core.ArrayBase",
    .tp_doc = "The field and slot access of a persisted array.",
    .tp_basicsize = sizeof(DataObject),
    .tp_flags = TYPE_FLAGS,
    .tp_base = &ObjectBase_Type,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)data_dealloc,
    .tp_traverse = (traverseproc)data_traverse,
    .tp_clear = (inquiry)data_clear,
    .tp_free = PyObject_GC_Del,
    .tp_members = data_members,
    .tp_as_mapping = &array_as_mapping,
    .tp_as_sequence = &array_as_sequence,
    .tp_iter = (getiterfunc)array_iter,
};

/* -- ListBase ------------------------------------------------------------------------------ */

/* A list's _from: the first slot of the range of slots the next save writes whole (every
   slot from it to the end, and the stored slots past the end as deletes); sys.maxsize when
   none. Appends lower it to the appended slot instead of adding the slot to _dirty, so a
   list that is only appended to makes no set in a checkpoint interval. */
typedef struct {
    DataObject data;
    PyObject *from;
} ListObject;

static int
list_traverse(ListObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->from);
    return data_traverse(&self->data, visit, arg);
}

static int
list_clear(ListObject *self)
{
    Py_CLEAR(self->from);
    return data_clear(&self->data);
}

static void
list_dealloc(ListObject *self)
{
    PyObject_GC_UnTrack(self);
    list_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef list_members[] = {
    MEMBER("_data", DataObject, data), MEMBER("_from", ListObject, from), {NULL}};

/* `if n < self._from: self._from = n` */
static int
list_lower_from(ListObject *self, Py_ssize_t n)
{
    PyObject *from;
    FIELD_OR_FAIL(from, self, from, "_from", return -1);
    if (PyLong_CheckExact(from)) {
        int overflow;
        long long current = PyLong_AsLongLongAndOverflow(from, &overflow);
        if (current == -1 && PyErr_Occurred()) {
            return -1;
        }
        if (overflow > 0 || (overflow == 0 && current > (long long)n)) {
            PyObject *key = index_int(n);
            if (key == NULL) {
                return -1;
            }
            Py_SETREF(self->from, key);
        }
        return 0;
    }
    PyObject *key = index_int(n);
    if (key == NULL) {
        return -1;
    }
    Py_INCREF(from);
    int lower = PyObject_RichCompareBool(key, from, Py_LT);
    if (lower > 0) {
        Py_SETREF(self->from, key);
    }
    else {
        Py_DECREF(key);
    }
    Py_DECREF(from);
    return lower < 0 ? -1 : 0;
}

/* `self._data[index]` */
static PyObject *
list_subscript(DataObject *self, PyObject *index)
{
    PyObject *data, *item;
    FIELD_OR_FAIL(data, self, data, "_data", return NULL);
    if (PyLong_CheckExact(index) && PyList_CheckExact(data)) {
        Py_ssize_t i = PyLong_AsSsize_t(index);
        if (i != -1 || !PyErr_Occurred()) {
            Py_ssize_t n = PyList_GET_SIZE(data);
            if (i < 0) {
                i += n;
            }
            if (i >= 0 && i < n) {
                return Py_NewRef(PyList_GET_ITEM(data, i));
            }
        }
        PyErr_Clear(); /* the list raises its own error */
    }
    Py_INCREF(data);
    item = PyObject_GetItem(data, index);
    Py_DECREF(data);
    return item;
}

static PyObject *
list_append(ListObject *list, PyObject *value)
{
    DataObject *self = &list->data;
    PyObject *data, *result;
    if (touch(&self->base) < 0) {
        return NULL;
    }
    set_flag(&self->base, F_META);
    FIELD_OR_FAIL(data, self, data, "_data", return NULL);
    Py_INCREF(data);
    Py_ssize_t n = length_of(data);
    if (n < 0 || list_lower_from(list, n) < 0) {
        Py_DECREF(data);
        return NULL;
    }
    if (PyList_CheckExact(data)) {
        int rc = PyList_Append(data, value);
        Py_DECREF(data);
        if (rc < 0) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    result = PyObject_CallMethodOneArg(data, str_append, value);
    Py_DECREF(data);
    if (result == NULL) {
        return NULL;
    }
    Py_DECREF(result);
    Py_RETURN_NONE;
}

static PyMethodDef list_methods[] = {
    {"append", (PyCFunction)list_append, METH_O,
     "append($self, value, /)\n--\n\n"
     "Add at the end. O(1); the checkpoint writes one item and the length."},
    {NULL}};

static PyMappingMethods list_as_mapping = {
    .mp_length = (lenfunc)data_length,
    .mp_subscript = (binaryfunc)list_subscript,
};

static PySequenceMethods list_as_sequence = {
    .sq_length = (lenfunc)data_length,
};

static PyTypeObject ListBase_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "objectspace.collections._core.ListBase",
    .tp_doc = "The values of a persisted list, with append, len and indexing.",
    .tp_basicsize = sizeof(ListObject),
    .tp_flags = TYPE_FLAGS,
    .tp_base = &ObjectBase_Type,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)list_dealloc,
    .tp_traverse = (traverseproc)list_traverse,
    .tp_clear = (inquiry)list_clear,
    .tp_free = PyObject_GC_Del,
    .tp_members = list_members,
    .tp_methods = list_methods,
    .tp_as_mapping = &list_as_mapping,
    .tp_as_sequence = &list_as_sequence,
};

/* -- StackBase ----------------------------------------------------------------------------- */

static PyObject *
stack_push(DataObject *self, PyObject *value)
{
    PyObject *data, *result;
    if (touch(&self->base) < 0) {
        return NULL;
    }
    set_flag(&self->base, F_META);
    /* self._dirty.add(len(self._data)) */
    FIELD_OR_FAIL(data, self, data, "_data", return NULL);
    Py_ssize_t n = length_of(data);
    if (n < 0 || dirty_add_ssize(&self->base, n) < 0) {
        return NULL;
    }
    /* self._data.append(value) */
    FIELD_OR_FAIL(data, self, data, "_data", return NULL);
    if (PyList_CheckExact(data)) {
        if (PyList_Append(data, value) < 0) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    Py_INCREF(data);
    result = PyObject_CallMethodOneArg(data, str_append, value);
    Py_DECREF(data);
    if (result == NULL) {
        return NULL;
    }
    Py_DECREF(result);
    Py_RETURN_NONE;
}

static PyObject *
stack_pop(DataObject *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *data, *value;
    FIELD_OR_FAIL(data, self, data, "_data", return NULL);
    int empty = is_empty(data);
    if (empty != 0) {
        return empty < 0 ? NULL : empty_error(&self->base, "pop from empty stack");
    }
    if (touch(&self->base) < 0) {
        return NULL;
    }
    set_flag(&self->base, F_META);
    /* value = self._data.pop() */
    FIELD_OR_FAIL(data, self, data, "_data", return NULL);
    Py_INCREF(data);
    if (PyList_CheckExact(data)) {
        value = fast_call0(&list_pop, data);
    }
    else {
        value = PyObject_CallMethodNoArgs(data, str_pop);
    }
    Py_DECREF(data);
    if (value == NULL) {
        return NULL;
    }
    /* self._dirty.add(len(self._data)) */
    FIELD_OR_FAIL(data, self, data, "_data", goto error);
    Py_ssize_t n = length_of(data);
    if (n < 0 || dirty_add_ssize(&self->base, n) < 0) {
        goto error;
    }
    return value;
error:
    Py_DECREF(value);
    return NULL;
}

static PyObject *
stack_peek(DataObject *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *data, *value;
    FIELD_OR_FAIL(data, self, data, "_data", return NULL);
    int empty = is_empty(data);
    if (empty != 0) {
        return empty < 0 ? NULL : empty_error(&self->base, "peek at empty stack");
    }
    FIELD_OR_FAIL(data, self, data, "_data", return NULL);
    if (PyList_CheckExact(data) && PyList_GET_SIZE(data) > 0) {
        return Py_NewRef(PyList_GET_ITEM(data, PyList_GET_SIZE(data) - 1));
    }
    PyObject *last = PyLong_FromLong(-1);
    if (last == NULL) {
        return NULL;
    }
    Py_INCREF(data);
    value = PyObject_GetItem(data, last);
    Py_DECREF(data);
    Py_DECREF(last);
    return value;
}

/*
 * The no-argument methods are METH_FASTCALL (checking that no argument was given, with
 * METH_NOARGS's message) rather than METH_NOARGS: CPython 3.11 calls a bound builtin of the
 * former straight from the interpreter loop, and one of the latter through the generic call.
 */
#define NO_ARGUMENTS(wrapper, impl, object_type, name)                                      \
    static PyObject *wrapper(PyObject *self, PyObject *const *args, Py_ssize_t nargs)      \
    {                                                                                      \
        if (nargs != 0) {                                                                  \
            PyErr_Format(PyExc_TypeError, name "() takes no arguments (%zd given)", nargs); \
            return NULL;                                                                   \
        }                                                                                  \
        return impl((object_type *)self, NULL);                                            \
    }

NO_ARGUMENTS(stack_pop_fast, stack_pop, DataObject, "pop")
NO_ARGUMENTS(stack_peek_fast, stack_peek, DataObject, "peek")

static PyMethodDef stack_methods[] = {
    {"push", (PyCFunction)stack_push, METH_O,
     "push($self, value, /)\n--\n\nPut ``value`` on top. O(1)."},
    {"pop", (PyCFunction)(void (*)(void))stack_pop_fast, METH_FASTCALL,
     "pop($self, /)\n--\n\nRemove and return the top value. O(1). Empty: ``IndexError``."},
    {"peek", (PyCFunction)(void (*)(void))stack_peek_fast, METH_FASTCALL,
     "peek($self, /)\n--\n\nThe top value, left in place. O(1). Empty: ``IndexError``."},
    {NULL}};

static PySequenceMethods stack_as_sequence = {
    .sq_length = (lenfunc)data_length,
};

static PyTypeObject StackBase_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "objectspace.collections._core.StackBase",
    .tp_doc = "The values of a persisted stack (bottom first), with its O(1) operations.",
    .tp_basicsize = sizeof(DataObject),
    .tp_flags = TYPE_FLAGS,
    .tp_base = &ObjectBase_Type,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)data_dealloc,
    .tp_traverse = (traverseproc)data_traverse,
    .tp_clear = (inquiry)data_clear,
    .tp_free = PyObject_GC_Del,
    .tp_members = data_members,
    .tp_methods = stack_methods,
    .tp_as_sequence = &stack_as_sequence,
};

/* -- QueueBase ----------------------------------------------------------------------------- */

typedef struct {
    BaseObject base;
    PyObject *data;
    PyObject *head;
} QueueObject;

static int
queue_traverse(QueueObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->data);
    Py_VISIT(self->head);
    return base_traverse(&self->base, visit, arg);
}

static int
queue_clear(QueueObject *self)
{
    Py_CLEAR(self->data);
    Py_CLEAR(self->head);
    return base_clear(&self->base);
}

static void
queue_dealloc(QueueObject *self)
{
    PyObject_GC_UnTrack(self);
    queue_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef queue_members[] = {
    MEMBER("_data", QueueObject, data),
    MEMBER("_head", QueueObject, head),
    {NULL}};

/* `head + n` */
static PyObject *
add_ssize(PyObject *head, Py_ssize_t n)
{
    if (PyLong_CheckExact(head)) {
        Py_ssize_t h = PyLong_AsSsize_t(head);
        if (h != -1 || !PyErr_Occurred()) {
            if (n <= 0 || h <= PY_SSIZE_T_MAX - n) {
                return index_int(h + n);
            }
        }
        else {
            PyErr_Clear();
        }
    }
    PyObject *count = PyLong_FromSsize_t(n);
    if (count == NULL) {
        return NULL;
    }
    PyObject *sum = PyNumber_Add(head, count);
    Py_DECREF(count);
    return sum;
}

static Py_ssize_t
queue_length(QueueObject *self)
{
    PyObject *data;
    FIELD_OR_FAIL(data, self, data, "_data", return -1);
    return length_of(data);
}

static PyObject *
queue_enqueue(QueueObject *self, PyObject *value)
{
    PyObject *head, *data, *key, *result;
    if (touch(&self->base) < 0) {
        return NULL;
    }
    set_flag(&self->base, F_META);
    /* self._dirty.add(self._head + len(self._data)) */
    FIELD_OR_FAIL(head, self, head, "_head", return NULL);
    Py_INCREF(head);
    if (self->data == NULL) {
        Py_DECREF(head);
        missing((PyObject *)self, "_data");
        return NULL;
    }
    Py_ssize_t n = length_of(self->data);
    if (n == 0 && PyLong_CheckExact(head)) {
        /* head + 0: the head object itself, which the next dequeue adds again (found by
           identity, and no new int) */
        key = head;
    }
    else {
        key = n < 0 ? NULL : add_ssize(head, n);
        Py_DECREF(head);
    }
    if (key == NULL) {
        return NULL;
    }
    int rc = dirty_add(&self->base, key);
    Py_DECREF(key);
    if (rc < 0) {
        return NULL;
    }
    /* self._data.append(value) */
    FIELD_OR_FAIL(data, self, data, "_data", return NULL);
    Py_INCREF(data);
    if (Py_IS_TYPE(data, deque_type)) {
        result = fast_call1(&deque_append, data, value);
    }
    else {
        result = PyObject_CallMethodOneArg(data, str_append, value);
    }
    Py_DECREF(data);
    if (result == NULL) {
        return NULL;
    }
    Py_DECREF(result);
    Py_RETURN_NONE;
}

static PyObject *
queue_dequeue(QueueObject *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *data, *head, *next, *value;
    FIELD_OR_FAIL(data, self, data, "_data", return NULL);
    int empty = is_empty(data);
    if (empty != 0) {
        return empty < 0 ? NULL : empty_error(&self->base, "dequeue from empty queue");
    }
    if (touch(&self->base) < 0) {
        return NULL;
    }
    set_flag(&self->base, F_META);
    /* self._dirty.add(self._head) */
    FIELD_OR_FAIL(head, self, head, "_head", return NULL);
    Py_INCREF(head);
    int rc = dirty_add(&self->base, head);
    Py_DECREF(head);
    if (rc < 0) {
        return NULL;
    }
    /* self._head += 1 */
    FIELD_OR_FAIL(head, self, head, "_head", return NULL);
    Py_INCREF(head);
    if (PyLong_CheckExact(head)) {
        next = add_ssize(head, 1);
    }
    else {
        next = PyNumber_InPlaceAdd(head, int_one);
    }
    Py_DECREF(head);
    if (next == NULL) {
        return NULL;
    }
    Py_XSETREF(self->head, next);
    /* return self._data.popleft() */
    FIELD_OR_FAIL(data, self, data, "_data", return NULL);
    Py_INCREF(data);
    if (Py_IS_TYPE(data, deque_type)) {
        value = fast_call0(&deque_popleft, data);
    }
    else {
        value = PyObject_CallMethodNoArgs(data, str_popleft);
    }
    Py_DECREF(data);
    return value;
}

static PyObject *
queue_peek(QueueObject *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *data, *value;
    FIELD_OR_FAIL(data, self, data, "_data", return NULL);
    int empty = is_empty(data);
    if (empty != 0) {
        return empty < 0 ? NULL : empty_error(&self->base, "peek at empty queue");
    }
    /* return self._data[0] */
    FIELD_OR_FAIL(data, self, data, "_data", return NULL);
    Py_INCREF(data);
    value = PyObject_GetItem(data, int_zero);
    Py_DECREF(data);
    return value;
}

NO_ARGUMENTS(queue_dequeue_fast, queue_dequeue, QueueObject, "dequeue")
NO_ARGUMENTS(queue_peek_fast, queue_peek, QueueObject, "peek")

static PyMethodDef queue_methods[] = {
    {"enqueue", (PyCFunction)queue_enqueue, METH_O,
     "enqueue($self, value, /)\n--\n\nAdd ``value`` at the tail. O(1)."},
    {"dequeue", (PyCFunction)(void (*)(void))queue_dequeue_fast, METH_FASTCALL,
     "dequeue($self, /)\n--\n\n"
     "Remove and return the value at the head. O(1). Empty: ``IndexError``."},
    {"peek", (PyCFunction)(void (*)(void))queue_peek_fast, METH_FASTCALL,
     "peek($self, /)\n--\n\n"
     "The value at the head, left in place. O(1). Empty: ``IndexError``."},
    {NULL}};

static PySequenceMethods queue_as_sequence = {
    .sq_length = (lenfunc)queue_length,
};

static PyTypeObject QueueBase_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "objectspace.collections._core.QueueBase",
    .tp_doc = "The values and head position of a persisted queue, with its O(1) operations.",
    .tp_basicsize = sizeof(QueueObject),
    .tp_flags = TYPE_FLAGS,
    .tp_base = &ObjectBase_Type,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)queue_dealloc,
    .tp_traverse = (traverseproc)queue_traverse,
    .tp_clear = (inquiry)queue_clear,
    .tp_free = PyObject_GC_Del,
    .tp_members = queue_members,
    .tp_methods = queue_methods,
    .tp_as_sequence = &queue_as_sequence,
};

/* -- the module ---------------------------------------------------------------------------- */

/* Ready `type`, list its fields in its __slots__, and add it to `module`. */
static int
add_type(PyObject *module, PyTypeObject *type)
{
    if (PyType_Ready(type) < 0) {
        return -1;
    }
    /* The fields: the members, and the flag fields (getsets whose closure is a FlagField) */
    PyObject *slots = PyList_New(0);
    if (slots == NULL) {
        return -1;
    }
    for (PyMemberDef *m = type->tp_members; m != NULL && m->name != NULL; m++) {
        PyObject *name = PyUnicode_InternFromString(m->name);
        if (name == NULL || PyList_Append(slots, name) < 0) {
            Py_XDECREF(name);
            Py_DECREF(slots);
            return -1;
        }
        Py_DECREF(name);
    }
    for (PyGetSetDef *g = type->tp_getset; g != NULL && g->name != NULL; g++) {
        if (g->get != (getter)flag_get) {
            continue;
        }
        PyObject *name = PyUnicode_InternFromString(g->name);
        if (name == NULL || PyList_Append(slots, name) < 0) {
            Py_XDECREF(name);
            Py_DECREF(slots);
            return -1;
        }
        Py_DECREF(name);
    }
    if (PyList_Sort(slots) < 0) {
        Py_DECREF(slots);
        return -1;
    }
    Py_SETREF(slots, PyList_AsTuple(slots));
    if (slots == NULL) {
        return -1;
    }
    int rc = PyDict_SetItemString(type->tp_dict, "__slots__", slots);
    Py_DECREF(slots);
    if (rc < 0) {
        return -1;
    }
    PyType_Modified(type);
    return PyModule_AddType(module, type);
}

static int
intern(PyObject **var, const char *text)
{
    *var = PyUnicode_InternFromString(text);
    return *var == NULL ? -1 : 0;
}

/* -- emit_rows: a dict's changed entries as rows (the twin of _pycore.emit_rows) ------------ */

/* rows[key] = prefix + payload, without a Python-level concatenation. */
static int
set_row(PyObject *rows, PyObject *key, PyObject *prefix, PyObject *payload)
{
    PyObject *row;
    if (PyBytes_CheckExact(prefix) && PyBytes_CheckExact(payload)) {
        Py_ssize_t a = PyBytes_GET_SIZE(prefix), b = PyBytes_GET_SIZE(payload);
        row = PyBytes_FromStringAndSize(NULL, a + b);
        if (row != NULL) {
            memcpy(PyBytes_AS_STRING(row), PyBytes_AS_STRING(prefix), (size_t)a);
            memcpy(PyBytes_AS_STRING(row) + a, PyBytes_AS_STRING(payload), (size_t)b);
        }
    }
    else {
        row = PyNumber_Add(prefix, payload);
    }
    if (row == NULL) {
        return -1;
    }
    int status = PyDict_SetItem(rows, key, row);
    Py_DECREF(row);
    return status;
}

/* encode_key(slot)[0]: the stored key of a key that is not plain. */
static PyObject *
encoded_key(PyObject *encode_key, PyObject *slot)
{
    PyObject *pair = PyObject_CallOneArg(encode_key, slot);
    if (pair == NULL) {
        return NULL;
    }
    PyObject *key = PySequence_GetItem(pair, 0);
    Py_DECREF(pair);
    return key;
}

/* One slot that is still in data: its row, or -1 with an exception set. */
static int
emit_live(PyObject *const *args, PyObject *slot)
{
    PyObject *rows = args[0], *data = args[2], *order = args[3], *key_dumps = args[4];
    PyObject *dumps = args[5], *pack_uint = args[6], *plain = args[7], *prefixes = args[8];
    PyObject *entry_mark = args[9], *encode_key = args[11];
    PyObject *key, *prefix = NULL, *value, *payload;
    int is_plain = PySet_Contains(plain, (PyObject *)Py_TYPE(slot));
    if (is_plain < 0) {
        return -1;
    }
    key = is_plain ? PyObject_CallOneArg(key_dumps, slot) : encoded_key(encode_key, slot);
    if (key == NULL) {
        return -1;
    }
    PyObject *number = PyDict_GetItemWithError(order, slot);
    if (number == NULL) {
        if (PyErr_Occurred()) {
            goto error;
        }
        number = int_zero;
    }
    Py_INCREF(number);
    Py_ssize_t n = PyLong_AsSsize_t(number);
    if (n == -1 && PyErr_Occurred()) {
        Py_DECREF(number);
        goto error;
    }
    if (n >= 0 && n < PyTuple_GET_SIZE(prefixes)) {
        prefix = PyTuple_GET_ITEM(prefixes, n);
        Py_INCREF(prefix);
        Py_DECREF(number);
    }
    else {
        PyObject *packed = PyObject_CallOneArg(pack_uint, number);
        Py_DECREF(number);
        if (packed == NULL) {
            goto error;
        }
        prefix = PyNumber_Add(entry_mark, packed);
        Py_DECREF(packed);
        if (prefix == NULL) {
            goto error;
        }
    }
    value = PyDict_GetItemWithError(data, slot);
    if (value == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_SetObject(PyExc_KeyError, slot);
        }
        goto error;
    }
    Py_INCREF(value);
    payload = PyObject_CallOneArg(dumps, value);
    Py_DECREF(value);
    if (payload == NULL) {
        goto error;
    }
    int status = set_row(rows, key, prefix, payload);
    Py_DECREF(payload);
    Py_DECREF(prefix);
    Py_DECREF(key);
    return status;

error:
    Py_XDECREF(prefix);
    Py_DECREF(key);
    return -1;
}

/* bisect_left(list, x) (``right`` 0: item < x goes right) or bisect_right(list, x) (1: x <
   item goes left), as the bisect module does them; -1 with an error set. */
static Py_ssize_t
bisect_in(PyObject *list, PyObject *x, int right)
{
    Py_ssize_t lo = 0, hi = PyList_GET_SIZE(list);
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (mid >= PyList_GET_SIZE(list)) { /* the list shrank under a comparison */
            PyErr_SetString(PyExc_RuntimeError, "a sorted list changed while it was read");
            return -1;
        }
        PyObject *item = PyList_GET_ITEM(list, mid);
        Py_INCREF(item);
        int less = right ? PyObject_RichCompareBool(x, item, Py_LT)
                         : PyObject_RichCompareBool(item, x, Py_LT);
        Py_DECREF(item);
        if (less < 0) {
            return -1;
        }
        if (less != right) {
            lo = mid + 1;
        }
        else {
            hi = mid;
        }
    }
    return lo;
}

/* The ``_maxes`` and ``_lists`` of sortedcontainers' SortedList ``sorted_list`` (new
   references, both lists); -1 with an error set. */
static int
sorted_list_parts(PyObject *sorted_list, PyObject **maxes, PyObject **lists)
{
    *maxes = PyObject_GetAttr(sorted_list, str_maxes);
    *lists = *maxes == NULL ? NULL : PyObject_GetAttr(sorted_list, str_lists);
    if (*lists != NULL && PyList_Check(*maxes) && PyList_Check(*lists)) {
        return 0;
    }
    if (*lists != NULL) {
        PyErr_SetString(PyExc_TypeError, "not a SortedList (_maxes, _lists)");
    }
    Py_CLEAR(*maxes);
    Py_CLEAR(*lists);
    return -1;
}

/* The element of sortedcontainers' SortedList ``sorted_list`` equal to ``x`` (which it
   holds): a new reference, or NULL with an error set. */
static PyObject *
sorted_list_held(PyObject *sorted_list, PyObject *x)
{
    PyObject *maxes, *lists, *found = NULL;
    if (sorted_list_parts(sorted_list, &maxes, &lists) < 0) {
        return NULL;
    }
    Py_ssize_t pos = bisect_in(maxes, x, 0);
    if (pos < 0) {
        goto done;
    }
    if (pos >= PyList_GET_SIZE(lists)) {
        PyErr_SetObject(PyExc_KeyError, x);
        goto done;
    }
    PyObject *sub = PyList_GET_ITEM(lists, pos);
    Py_INCREF(sub);
    if (!PyList_Check(sub)) {
        PyErr_SetString(PyExc_TypeError, "not a SortedList (_lists)");
        Py_DECREF(sub);
        goto done;
    }
    Py_ssize_t i = bisect_in(sub, x, 0);
    if (i >= 0) {
        if (i >= PyList_GET_SIZE(sub)) {
            PyErr_SetObject(PyExc_KeyError, x);
        }
        else {
            found = PyList_GET_ITEM(sub, i);
            Py_INCREF(found);
        }
    }
    Py_DECREF(sub);
done:
    Py_DECREF(maxes);
    Py_DECREF(lists);
    return found;
}

/* The load of sortedcontainers' SortedList ``sorted_list`` when it keeps no position index
   (its ``_index`` empty: an edit need not update one), else -1; -2 with an error set. */
static Py_ssize_t
sorted_list_load(PyObject *sorted_list)
{
    PyObject *load = PyObject_GetAttr(sorted_list, str_load);
    if (load == NULL) {
        return -2;
    }
    Py_ssize_t n = PyLong_Check(load) ? PyLong_AsSsize_t(load) : -1;
    Py_DECREF(load);
    if (n == -1 && PyErr_Occurred()) {
        return -2;
    }
    PyObject *index = PyObject_GetAttr(sorted_list, str_index);
    if (index == NULL) {
        return -2;
    }
    int plain = PyList_Check(index) && PyList_GET_SIZE(index) == 0;
    Py_DECREF(index);
    return plain && n >= 0 ? n : -1;
}

/* ``sorted_list._len`` += ``delta`` (an int object); -1 with an error set. */
static int
sorted_list_count(PyObject *sorted_list, PyObject *delta)
{
    PyObject *length = PyObject_GetAttr(sorted_list, str_len);
    if (length == NULL) {
        return -1;
    }
    PyObject *changed = PyNumber_Add(length, delta);
    Py_DECREF(length);
    if (changed == NULL) {
        return -1;
    }
    int failed = PyObject_SetAttr(sorted_list, str_len, changed);
    Py_DECREF(changed);
    return failed;
}

/* sorted_insert(sorted_list, value): sortedcontainers' SortedList.add(value) (see
   objectspace.collections._pycore.sorted_insert): the bisections and the insertion here, the
   list's own _expand when a sublist outgrows twice the load or its position index is
   built, and its own add for an empty list. */
static PyObject *
core_sorted_insert(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "sorted_insert takes sorted_list, value");
        return NULL;
    }
    PyObject *sorted_list = args[0], *value = args[1];
    PyObject *maxes, *lists, *result = NULL, *sub = NULL, *found = NULL;
    if (sorted_list_parts(sorted_list, &maxes, &lists) < 0) {
        return NULL;
    }
    if (PyList_GET_SIZE(maxes) == 0 || PyList_GET_SIZE(maxes) != PyList_GET_SIZE(lists)) {
        result = PyObject_CallMethodOneArg(sorted_list, str_add, value);
        goto done;
    }
    Py_ssize_t pos = bisect_in(maxes, value, 1);
    if (pos < 0) {
        goto done;
    }
    Py_ssize_t last = PyList_GET_SIZE(maxes) - 1;
    if (pos > last + 1 || last >= PyList_GET_SIZE(lists)) {
        PyErr_SetString(PyExc_RuntimeError, "a sorted list changed while it was read");
        goto done;
    }
    sub = PyList_GET_ITEM(lists, pos > last ? last : pos);
    Py_INCREF(sub);
    if (!PyList_Check(sub)) {
        PyErr_SetString(PyExc_TypeError, "not a SortedList (_lists)");
        goto done;
    }
    if (pos > last) { /* past every sublist's maximum: the last sublist's new maximum */
        pos = last;
        if (PyList_Append(sub, value) < 0) {
            goto done;
        }
        Py_INCREF(value);
        if (PyList_SetItem(maxes, pos, value) < 0) {
            goto done;
        }
    }
    else {
        Py_ssize_t at = bisect_in(sub, value, 1);
        if (at < 0 || PyList_Insert(sub, at, value) < 0) {
            goto done;
        }
    }
    /* _expand(pos): only a split or a built position index needs its work */
    Py_ssize_t load = sorted_list_load(sorted_list);
    if (load == -2) {
        goto done;
    }
    if (load < 0 || PyList_GET_SIZE(sub) > 2 * load) {
        PyObject *at = PyLong_FromSsize_t(pos);
        if (at == NULL) {
            goto done;
        }
        found = PyObject_CallMethodOneArg(sorted_list, str_expand, at);
        Py_DECREF(at);
        if (found == NULL) {
            goto done;
        }
    }
    if (sorted_list_count(sorted_list, int_one) == 0) {
        result = Py_NewRef(Py_None);
    }
done:
    Py_XDECREF(found);
    Py_XDECREF(sub);
    Py_DECREF(maxes);
    Py_DECREF(lists);
    if (result != NULL && result != Py_None) { /* the list's own add returns None */
        Py_SETREF(result, Py_NewRef(Py_None));
    }
    return result;
}

/* sorted_remove(sorted_list, value): sortedcontainers' SortedList.remove(value) (see
   objectspace.collections._pycore.sorted_remove): the bisections, the equality test and
   the deletion here, the list's own _delete when the sublist would fall to half the load
   (it then joins its neighbour) or its position index is built. ValueError, the list
   unchanged, when it does not hold ``value``. */
static PyObject *
core_sorted_remove(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "sorted_remove takes sorted_list, value");
        return NULL;
    }
    PyObject *sorted_list = args[0], *value = args[1];
    PyObject *maxes, *lists, *result = NULL, *sub = NULL;
    if (sorted_list_parts(sorted_list, &maxes, &lists) < 0) {
        return NULL;
    }
    Py_ssize_t pos = PyList_GET_SIZE(maxes) ? bisect_in(maxes, value, 0) : 0;
    if (pos < 0) {
        goto done;
    }
    if (pos >= PyList_GET_SIZE(maxes) || pos >= PyList_GET_SIZE(lists)) {
        goto absent;
    }
    sub = PyList_GET_ITEM(lists, pos);
    Py_INCREF(sub);
    if (!PyList_Check(sub)) {
        PyErr_SetString(PyExc_TypeError, "not a SortedList (_lists)");
        goto done;
    }
    Py_ssize_t idx = bisect_in(sub, value, 0);
    if (idx < 0) {
        goto done;
    }
    if (idx >= PyList_GET_SIZE(sub)) {
        goto absent;
    }
    PyObject *item = PyList_GET_ITEM(sub, idx);
    Py_INCREF(item);
    int equal = PyObject_RichCompareBool(item, value, Py_EQ);
    Py_DECREF(item);
    if (equal < 0) {
        goto done;
    }
    if (!equal) {
        goto absent;
    }
    /* _delete(pos, idx): only a join of sublists or a built position index needs its work */
    Py_ssize_t load = sorted_list_load(sorted_list);
    if (load == -2) {
        goto done;
    }
    if (load < 0 || idx >= PyList_GET_SIZE(sub) || PyList_GET_SIZE(sub) - 1 <= (load >> 1) ||
        pos >= PyList_GET_SIZE(maxes)) {
        result = PyObject_CallMethod(sorted_list, "_delete", "nn", pos, idx);
        goto done;
    }
    if (PySequence_DelItem(sub, idx) < 0) {
        goto done;
    }
    PyObject *last = PyList_GET_ITEM(sub, PyList_GET_SIZE(sub) - 1);
    Py_INCREF(last);
    if (PyList_SetItem(maxes, pos, last) < 0) {
        goto done;
    }
    if (sorted_list_count(sorted_list, int_minus_one) == 0) {
        result = Py_NewRef(Py_None);
    }
    goto done;
absent:
    {
        PyObject *text = PyObject_Repr(value);
        if (text != NULL) {
            PyErr_Format(PyExc_ValueError, "%U not in list", text);
            Py_DECREF(text);
        }
    }
done:
    Py_XDECREF(sub);
    Py_DECREF(maxes);
    Py_DECREF(lists);
    if (result != NULL && result != Py_None) { /* the list's own _delete returns None */
        Py_SETREF(result, Py_NewRef(Py_None));
    }
    return result;
}

/* -- PersistedSortedSet.add / discard -------------------------------------------------------- */

/* Whether a set must keep ``value``'s spelling beside its row (``_spell``): not for a value of
   a type in ``plain``, nor for a tuple of such values (a flat key: its stored key decodes to
   it, types and all); -1 with an error set. */
static int
needs_spelling(PyObject *value, PyObject *plain)
{
    int found = PySet_Contains(plain, (PyObject *)Py_TYPE(value));
    if (found != 0) {
        return found < 0 ? -1 : 0;
    }
    if (!PyTuple_CheckExact(value)) {
        return 1;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(value); i++) {
        found = PySet_Contains(plain, (PyObject *)Py_TYPE(PyTuple_GET_ITEM(value, i)));
        if (found <= 0) {
            return found < 0 ? -1 : 1;
        }
    }
    return 0;
}

/* The hash set and sorted list of a persisted sorted set ``self`` (``self._data._set``,
   ``self._data._list``: new references); -1 with an error set. */
static int
sorted_set_parts(PyObject *self, PyObject **members, PyObject **list)
{
    *members = *list = NULL;
    if (!PyObject_TypeCheck(self, &ObjectBase_Type)) {
        PyErr_SetString(PyExc_TypeError, "not a persisted object");
        return -1;
    }
    PyObject *data = PyObject_GetAttr(self, str_data);
    if (data == NULL) {
        return -1;
    }
    *members = PyObject_GetAttr(data, str_set);
    *list = *members == NULL ? NULL : PyObject_GetAttr(data, str_list);
    Py_DECREF(data);
    if (*list != NULL && PySet_CheckExact(*members)) {
        return 0;
    }
    if (*list != NULL) {
        PyErr_SetString(PyExc_TypeError, "not a SortedSet (_set)");
    }
    Py_CLEAR(*members);
    Py_CLEAR(*list);
    return -1;
}

/* After an edit that changed the set but could not be tracked: ``self._rewrite_all()``, the
   error raised kept (see _SetBase._track_edit). Always -1. */
static int
rewrite_all(PyObject *self)
{
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyObject *result = PyObject_CallMethodNoArgs(self, str_rewrite_all);
    Py_XDECREF(result);
    if (result == NULL) {
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(traceback);
        return -1; /* its own error instead */
    }
    PyErr_Restore(type, value, traceback);
    return -1;
}

/* sorted_set_add(self, value, plain): PersistedSortedSet.add (see
   objectspace.collections._pycore.sorted_set_add). */
static PyObject *
core_sorted_set_add(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "sorted_set_add takes self, value, plain");
        return NULL;
    }
    PyObject *self = args[0], *value = args[1], *plain = args[2], *members, *list;
    if (!PyAnySet_Check(plain)) {
        PyErr_SetString(PyExc_TypeError, "plain must be a set of types");
        return NULL;
    }
    if (sorted_set_parts(self, &members, &list) < 0) {
        return NULL;
    }
    PyObject *result = NULL;
    int held = PySet_Contains(members, value);
    if (held != 0) {
        if (held > 0) {
            result = Py_NewRef(Py_None);
        }
        goto done;
    }
    if (touch((BaseObject *)self) < 0 || PySet_Add(members, value) < 0) {
        goto done;
    }
    PyObject *insert_args[2] = {list, value};
    PyObject *inserted = core_sorted_insert(module, insert_args, 2);
    if (inserted == NULL) {
        /* The sorted list's comparisons raised: out of the hash set again. */
        PyObject *type, *error, *traceback;
        PyErr_Fetch(&type, &error, &traceback);
        if (PySet_Discard(members, value) < 0) {
            PyErr_Clear();
        }
        PyErr_Restore(type, error, traceback);
        goto done;
    }
    Py_DECREF(inserted);
    if (dirty_add((BaseObject *)self, value) < 0) {
        rewrite_all(self);
        goto done;
    }
    int spelled = needs_spelling(value, plain);
    if (spelled > 0) {
        PyObject *spell = PyObject_GetAttr(self, str_spell);
        if (spell == NULL || PyObject_SetItem(spell, value, value) < 0) {
            spelled = -1;
        }
        Py_XDECREF(spell);
    }
    if (spelled < 0) {
        rewrite_all(self);
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    Py_DECREF(members);
    Py_DECREF(list);
    return result;
}

/* sorted_set_discard(self, value): PersistedSortedSet.discard (see
   objectspace.collections._pycore.sorted_set_discard). */
static PyObject *
core_sorted_set_discard(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "sorted_set_discard takes self, value");
        return NULL;
    }
    PyObject *self = args[0], *value = args[1], *members, *list;
    if (sorted_set_parts(self, &members, &list) < 0) {
        return NULL;
    }
    PyObject *result = NULL;
    int held = PySet_Contains(members, value);
    if (held != 1) {
        if (held == 0) {
            result = Py_NewRef(Py_None);
        }
        goto done;
    }
    if (touch((BaseObject *)self) < 0 || PySet_Discard(members, value) < 0) {
        goto done;
    }
    PyObject *remove_args[2] = {list, value};
    PyObject *removed = core_sorted_remove(module, remove_args, 2);
    if (removed == NULL) {
        /* The sorted list's comparisons raised: back in the hash set if the list still
           holds it. */
        PyObject *type, *error, *traceback;
        PyErr_Fetch(&type, &error, &traceback);
        Py_ssize_t n = PyObject_Length(list);
        if (n < 0 || (n != PySet_GET_SIZE(members) && PySet_Add(members, value) < 0)) {
            PyErr_Clear();
        }
        PyErr_Restore(type, error, traceback);
        goto done;
    }
    Py_DECREF(removed);
    if (dirty_add((BaseObject *)self, value) < 0) {
        rewrite_all(self);
        goto done;
    }
    PyObject *spell = PyObject_GetAttr(self, str_spell);
    if (spell == NULL) {
        rewrite_all(self);
        goto done;
    }
    int failed = 0;
    if (PyDict_CheckExact(spell)) {
        if (PyDict_GET_SIZE(spell) && PyDict_DelItem(spell, value) < 0) {
            if (PyErr_ExceptionMatches(PyExc_KeyError)) {
                PyErr_Clear();
            }
            else {
                failed = 1;
            }
        }
    }
    else {
        int any = PyObject_IsTrue(spell);
        PyObject *popped = any > 0 ? PyObject_CallMethod(spell, "pop", "OO", value, Py_None)
                                   : NULL;
        failed = any < 0 || (any > 0 && popped == NULL);
        Py_XDECREF(popped);
    }
    Py_DECREF(spell);
    if (failed) {
        rewrite_all(self);
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    Py_DECREF(members);
    Py_DECREF(list);
    return result;
}

/* sorted_between(sorted_list, low, high): the elements x of sortedcontainers' SortedList
   ``sorted_list`` with low <= x < high, ascending, as a new list (see
   objectspace.collections._pycore.sorted_between). */
static PyObject *
core_sorted_between(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "sorted_between takes sorted_list, low, high");
        return NULL;
    }
    PyObject *high = args[2], *maxes, *lists, *found = NULL;
    if (sorted_list_parts(args[0], &maxes, &lists) < 0) {
        return NULL;
    }
    Py_ssize_t pos = bisect_in(maxes, args[1], 0);
    if (pos < 0) {
        goto done;
    }
    found = PyList_New(0);
    if (found == NULL) {
        goto done;
    }
    for (Py_ssize_t i = -1; pos < PyList_GET_SIZE(lists); pos++, i = 0) {
        PyObject *sub = PyList_GET_ITEM(lists, pos);
        if (!PyList_Check(sub)) {
            PyErr_SetString(PyExc_TypeError, "not a SortedList (_lists)");
            Py_CLEAR(found);
            goto done;
        }
        Py_INCREF(sub);
        if (i < 0 && (i = bisect_in(sub, args[1], 0)) < 0) {
            Py_DECREF(sub);
            Py_CLEAR(found);
            goto done;
        }
        for (; i < PyList_GET_SIZE(sub); i++) { /* (a comparison may change the list) */
            PyObject *x = PyList_GET_ITEM(sub, i);
            Py_INCREF(x);
            int less = PyObject_RichCompareBool(x, high, Py_LT);
            if (less <= 0 || PyList_Append(found, x) < 0) {
                Py_DECREF(x);
                Py_DECREF(sub);
                if (less != 0) {
                    Py_CLEAR(found); /* an error */
                }
                goto done;
            }
            Py_DECREF(x);
        }
        Py_DECREF(sub);
    }
done:
    Py_DECREF(maxes);
    Py_DECREF(lists);
    return found;
}

/* encode_key(key) as (row, exact): new references, or -1 with an error set. */
static int
encode_pair(PyObject *encode_key, PyObject *key, PyObject **row, int *exact)
{
    PyObject *pair = PyObject_CallOneArg(encode_key, key);
    if (pair == NULL) {
        return -1;
    }
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
        Py_DECREF(pair);
        PyErr_SetString(PyExc_TypeError, "encode_key must return a (bytes, bool) pair");
        return -1;
    }
    *exact = PyObject_IsTrue(PyTuple_GET_ITEM(pair, 1));
    if (*exact < 0) {
        Py_DECREF(pair);
        return -1;
    }
    *row = PyTuple_GET_ITEM(pair, 0);
    Py_INCREF(*row);
    Py_DECREF(pair);
    return 0;
}

/* A removed slot's row: DELETED under its stored key, none if it cannot be encoded. */
static int
emit_deleted(PyObject *rows, PyObject *slot, PyObject *encode_key, PyObject *deleted,
             PyObject *unencodable)
{
    PyObject *key = encoded_key(encode_key, slot);
    if (key == NULL) {
        if (PyErr_ExceptionMatches(unencodable)) {
            PyErr_Clear(); /* a key that cannot be encoded was never stored */
            return 0;
        }
        return -1;
    }
    int status = PyDict_SetItem(rows, key, deleted);
    Py_DECREF(key);
    return status;
}

typedef int (*emit_live_fn)(PyObject *const *args, PyObject *slot);

/* The loop of emit_sorted_rows and emit_set_rows: each slot ``contains`` finds in
   ``members`` goes to ``live``; a removed one, unless ``cleared``, becomes a DELETED row
   (none if it cannot be encoded). None, or NULL with the error that stopped it. */
static PyObject *
emit_each(PyObject *const *args, PyObject *slots, PyObject *members,
          int (*contains)(PyObject *, PyObject *), emit_live_fn live, int cleared,
          PyObject *rows, PyObject *encode_key, PyObject *deleted, PyObject *unencodable)
{
    PyObject *iterator = PyObject_GetIter(slots);
    if (iterator == NULL) {
        return NULL;
    }
    PyObject *slot;
    int status = 0;
    while ((slot = PyIter_Next(iterator)) != NULL) {
        int found = contains(members, slot);
        if (found < 0) {
            status = -1;
        }
        else if (found) {
            status = live(args, slot);
        }
        else if (!cleared) {
            status = emit_deleted(rows, slot, encode_key, deleted, unencodable);
        }
        Py_DECREF(slot);
        if (status < 0) {
            break;
        }
    }
    Py_DECREF(iterator);
    if (PyErr_Occurred()) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static int
emit_sorted_live(PyObject *const *args, PyObject *slot)
{
    PyObject *rows = args[0], *data = args[2], *sorted_list = args[3], *dumps = args[5];
    PyObject *encode_key = args[6], *prefix = args[7], *pack_entry = args[8];
    PyObject *key = sorted_list_held(sorted_list, slot);
    if (key == NULL) {
        return -1;
    }
    PyObject *row = NULL, *spelling = NULL, *payload = NULL;
    int exact, status = -1;
    if (encode_pair(encode_key, key, &row, &exact) < 0) {
        goto done;
    }
    if (!exact) {
        spelling = PyObject_CallOneArg(dumps, key);
        if (spelling == NULL) {
            goto done;
        }
    }
    PyObject *value = PyDict_GetItemWithError(data, key);
    if (value == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_SetObject(PyExc_KeyError, key);
        }
        goto done;
    }
    Py_INCREF(value);
    payload = PyObject_CallOneArg(dumps, value);
    Py_DECREF(value);
    if (payload == NULL) {
        goto done;
    }
    if (spelling == NULL) {
        status = set_row(rows, row, prefix, payload);
    }
    else {
        PyObject *entry = PyObject_CallFunctionObjArgs(pack_entry, int_zero, spelling, payload,
                                                       NULL);
        if (entry == NULL) {
            goto done;
        }
        status = PyDict_SetItem(rows, row, entry);
        Py_DECREF(entry);
    }
done:
    Py_XDECREF(payload);
    Py_XDECREF(spelling);
    Py_XDECREF(row);
    Py_DECREF(key);
    return status;
}

static PyObject *
core_emit_sorted_rows(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 11) {
        PyErr_Format(PyExc_TypeError, "emit_sorted_rows takes 11 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *rows = args[0], *slots = args[1], *data = args[2], *deleted = args[9];
    PyObject *encode_key = args[6], *unencodable = args[10];
    int cleared = PyObject_IsTrue(args[4]);
    if (cleared < 0) {
        return NULL;
    }
    if (!PyDict_Check(rows) || !PyDict_Check(data)) {
        PyErr_SetString(PyExc_TypeError, "emit_sorted_rows: rows and data must be dicts");
        return NULL;
    }
    return emit_each(args, slots, data, PyDict_Contains, emit_sorted_live, cleared, rows,
                     encode_key, deleted, unencodable);
}

static int
emit_set_live(PyObject *const *args, PyObject *slot)
{
    PyObject *rows = args[0], *spell = args[3], *key_dumps = args[5], *encode_key = args[6];
    PyObject *plain = args[7], *entry_mark = args[8], *spelled = args[9], *dumps = args[10];
    PyObject *value = NULL;
    if (PyDict_GET_SIZE(spell)) {
        value = PyDict_GetItemWithError(spell, slot);
        if (value == NULL && PyErr_Occurred()) {
            return -1;
        }
    }
    PyObject *row;
    int status;
    if (value == NULL) {
        int is_plain = PySet_Contains(plain, (PyObject *)Py_TYPE(slot));
        if (is_plain < 0) {
            return -1;
        }
        row = is_plain ? PyObject_CallOneArg(key_dumps, slot) : encoded_key(encode_key, slot);
        if (row == NULL) {
            return -1;
        }
        status = PyDict_SetItem(rows, row, entry_mark);
        Py_DECREF(row);
        return status;
    }
    Py_INCREF(value);
    int exact;
    if (encode_pair(encode_key, value, &row, &exact) < 0) {
        Py_DECREF(value);
        return -1;
    }
    if (exact) {
        status = PyDict_SetItem(rows, row, entry_mark);
    }
    else {
        PyObject *payload = PyObject_CallOneArg(dumps, value);
        status = payload == NULL ? -1 : set_row(rows, row, spelled, payload);
        Py_XDECREF(payload);
    }
    Py_DECREF(row);
    Py_DECREF(value);
    return status;
}

static PyObject *
core_emit_set_rows(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 13) {
        PyErr_Format(PyExc_TypeError, "emit_set_rows takes 13 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *rows = args[0], *slots = args[1], *members = args[2], *spell = args[3];
    PyObject *plain = args[7], *encode_key = args[6], *deleted = args[11];
    PyObject *unencodable = args[12];
    int cleared = PyObject_IsTrue(args[4]);
    if (cleared < 0) {
        return NULL;
    }
    if (!PyDict_Check(rows) || !PyAnySet_Check(members) || !PyDict_Check(spell) ||
        !PyAnySet_Check(plain)) {
        PyErr_SetString(PyExc_TypeError,
                        "emit_set_rows: rows and spell must be dicts, members and plain sets");
        return NULL;
    }
    return emit_each(args, slots, members, PySet_Contains, emit_set_live, cleared, rows,
                     encode_key, deleted, unencodable);
}

static PyObject *
core_emit_rows(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 13) {
        PyErr_Format(PyExc_TypeError, "emit_rows takes 13 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *rows = args[0], *slots = args[1], *data = args[2], *order = args[3];
    PyObject *plain = args[7], *prefixes = args[8], *deleted = args[10];
    PyObject *encode_key = args[11], *unencodable = args[12];
    if (!PyDict_Check(rows) || !PyDict_Check(data) || !PyDict_Check(order) ||
        !PyAnySet_Check(plain) || !PyTuple_Check(prefixes)) {
        PyErr_SetString(PyExc_TypeError,
                        "emit_rows: rows, data and order must be dicts, plain a set, "
                        "prefixes a tuple");
        return NULL;
    }
    PyObject *iterator = PyObject_GetIter(slots);
    if (iterator == NULL) {
        return NULL;
    }
    PyObject *slot;
    while ((slot = PyIter_Next(iterator)) != NULL) {
        int live = PyDict_Contains(data, slot);
        int status;
        if (live < 0) {
            status = -1;
        }
        else if (live) {
            status = emit_live(args, slot);
        }
        else {
            PyObject *key = encoded_key(encode_key, slot);
            if (key == NULL) {
                if (PyErr_ExceptionMatches(unencodable)) {
                    /* a key that cannot be encoded was never stored */
                    PyErr_Clear();
                    Py_DECREF(slot);
                    continue;
                }
                status = -1;
            }
            else {
                status = PyDict_SetItem(rows, key, deleted);
                Py_DECREF(key);
            }
        }
        Py_DECREF(slot);
        if (status < 0) {
            break;
        }
    }
    Py_DECREF(iterator);
    if (PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
            /* a key or value needs the general way after all (an int beyond 64 bits) */
            PyErr_Clear();
            Py_RETURN_FALSE;
        }
        return NULL;
    }
    Py_RETURN_TRUE;
}

/* ---- KeyEncoder: a flat tuple key's stored bytes in one C pass ----------------------------

   The serializer's ``raw_encode_key`` stores a tuple of plain values (str, int within 64
   bits, bytes, None) as a msgpack extension value (type ``code``) holding the elements
   packed one after the other, as msgpack-python packs them (``use_bin_type``). A
   KeyEncoder returns ``(those bytes, True)`` for such a key and hands any other key (or
   one it cannot pack: an int beyond 64 bits, a str that is not valid UTF-8) to
   ``fallback``, the serializer's own function. */

typedef struct {
    PyObject_HEAD
    PyObject *fallback;
    vectorcallfunc vectorcall;
    unsigned char code;
} KeyEncoderObject;

/* The packed size of plain value ``v`` (-1: not one this packs, no error set). */
static Py_ssize_t
key_element_size(PyObject *v)
{
    if (v == Py_None) {
        return 1;
    }
    if (PyLong_CheckExact(v)) {
        int overflow;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow > 0) {
            unsigned long long u = PyLong_AsUnsignedLongLong(v);
            if (u == (unsigned long long)-1 && PyErr_Occurred()) {
                PyErr_Clear();
                return -1;
            }
            return 9;
        }
        if (overflow < 0) {
            return -1;
        }
        if (x == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return -1;
        }
        if (x >= -32 && x < 128) {
            return 1;
        }
        if (x >= 0) {
            return x < 256 ? 2 : x < 65536 ? 3 : x < 4294967296LL ? 5 : 9;
        }
        return x >= -128 ? 2 : x >= -32768 ? 3 : x >= -2147483648LL ? 5 : 9;
    }
    if (PyUnicode_CheckExact(v)) {
        Py_ssize_t n;
        if (PyUnicode_AsUTF8AndSize(v, &n) == NULL) {
            PyErr_Clear();
            return -1;
        }
        if (n > 0xFFFFFFFFLL) {
            return -1;
        }
        return n + (n < 32 ? 1 : n < 256 ? 2 : n < 65536 ? 3 : 5);
    }
    if (PyBytes_CheckExact(v)) {
        Py_ssize_t n = PyBytes_GET_SIZE(v);
        if (n > 0xFFFFFFFFLL) {
            return -1;
        }
        return n + (n < 256 ? 2 : n < 65536 ? 3 : 5);
    }
    return -1;
}

static inline unsigned char *
put_be(unsigned char *p, unsigned long long x, int width)
{
    for (int i = width - 1; i >= 0; i--) {
        p[i] = (unsigned char)(x & 0xFF);
        x >>= 8;
    }
    return p + width;
}

/* Pack plain value ``v`` (sized by key_element_size) at ``p``; the end. */
static unsigned char *
key_element_pack(unsigned char *p, PyObject *v)
{
    if (v == Py_None) {
        *p++ = 0xC0;
        return p;
    }
    if (PyLong_CheckExact(v)) {
        int overflow;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow > 0) {
            *p++ = 0xCF;
            return put_be(p, PyLong_AsUnsignedLongLong(v), 8);
        }
        if (x >= -32 && x < 128) {
            *p++ = (unsigned char)(x & 0xFF);
            return p;
        }
        if (x >= 0) {
            if (x < 256) {
                *p++ = 0xCC;
                return put_be(p, (unsigned long long)x, 1);
            }
            if (x < 65536) {
                *p++ = 0xCD;
                return put_be(p, (unsigned long long)x, 2);
            }
            if (x < 4294967296LL) {
                *p++ = 0xCE;
                return put_be(p, (unsigned long long)x, 4);
            }
            *p++ = 0xCF;
            return put_be(p, (unsigned long long)x, 8);
        }
        if (x >= -128) {
            *p++ = 0xD0;
            return put_be(p, (unsigned long long)x, 1);
        }
        if (x >= -32768) {
            *p++ = 0xD1;
            return put_be(p, (unsigned long long)x, 2);
        }
        if (x >= -2147483648LL) {
            *p++ = 0xD2;
            return put_be(p, (unsigned long long)x, 4);
        }
        *p++ = 0xD3;
        return put_be(p, (unsigned long long)x, 8);
    }
    const char *data;
    Py_ssize_t n;
    if (PyUnicode_CheckExact(v)) {
        data = PyUnicode_AsUTF8AndSize(v, &n); /* cached by key_element_size */
        if (n < 32) {
            *p++ = (unsigned char)(0xA0 | n);
        }
        else if (n < 256) {
            *p++ = 0xD9;
            p = put_be(p, (unsigned long long)n, 1);
        }
        else if (n < 65536) {
            *p++ = 0xDA;
            p = put_be(p, (unsigned long long)n, 2);
        }
        else {
            *p++ = 0xDB;
            p = put_be(p, (unsigned long long)n, 4);
        }
    }
    else {
        data = PyBytes_AS_STRING(v);
        n = PyBytes_GET_SIZE(v);
        if (n < 256) {
            *p++ = 0xC4;
            p = put_be(p, (unsigned long long)n, 1);
        }
        else if (n < 65536) {
            *p++ = 0xC5;
            p = put_be(p, (unsigned long long)n, 2);
        }
        else {
            *p++ = 0xC6;
            p = put_be(p, (unsigned long long)n, 4);
        }
    }
    memcpy(p, data, (size_t)n);
    return p + n;
}

/* The stored bytes of flat tuple key ``key``, or NULL without an error set when it is
   not one this packs. */
static PyObject *
key_encoder_pack(KeyEncoderObject *self, PyObject *key)
{
    Py_ssize_t count = PyTuple_GET_SIZE(key);
    Py_ssize_t body = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t size = key_element_size(PyTuple_GET_ITEM(key, i));
        if (size < 0) {
            return NULL;
        }
        body += size;
    }
    if (body > 0xFFFFFFFFLL) {
        return NULL;
    }
    Py_ssize_t head;
    if (body == 1 || body == 2 || body == 4 || body == 8 || body == 16) {
        head = 2;
    }
    else {
        head = body < 256 ? 3 : body < 65536 ? 4 : 6;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, head + body);
    if (out == NULL) {
        return NULL;
    }
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
    switch (body) {
    case 1: *p++ = 0xD4; break;
    case 2: *p++ = 0xD5; break;
    case 4: *p++ = 0xD6; break;
    case 8: *p++ = 0xD7; break;
    case 16: *p++ = 0xD8; break;
    default:
        if (body < 256) {
            *p++ = 0xC7;
            p = put_be(p, (unsigned long long)body, 1);
        }
        else if (body < 65536) {
            *p++ = 0xC8;
            p = put_be(p, (unsigned long long)body, 2);
        }
        else {
            *p++ = 0xC9;
            p = put_be(p, (unsigned long long)body, 4);
        }
    }
    *p++ = self->code;
    for (Py_ssize_t i = 0; i < count; i++) {
        p = key_element_pack(p, PyTuple_GET_ITEM(key, i));
    }
    return out;
}

static PyObject *
key_encoder_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf,
                       PyObject *kwnames)
{
    KeyEncoderObject *self = (KeyEncoderObject *)callable;
    if (PyVectorcall_NARGS(nargsf) != 1 || kwnames != NULL) {
        PyErr_SetString(PyExc_TypeError, "KeyEncoder takes one positional argument (a key)");
        return NULL;
    }
    PyObject *key = args[0];
    if (PyTuple_CheckExact(key)) {
        PyObject *packed = key_encoder_pack(self, key);
        if (packed != NULL) {
            PyObject *pair = PyTuple_New(2);
            if (pair == NULL) {
                Py_DECREF(packed);
                return NULL;
            }
            PyTuple_SET_ITEM(pair, 0, packed);
            Py_INCREF(Py_True);
            PyTuple_SET_ITEM(pair, 1, Py_True);
            return pair;
        }
        if (PyErr_Occurred()) {
            return NULL; /* out of memory */
        }
    }
    return PyObject_CallOneArg(self->fallback, key);
}

static PyObject *
key_encoder_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    int code;
    PyObject *fallback;
    static char *kwlist[] = {"code", "fallback", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "iO:KeyEncoder", kwlist, &code, &fallback)) {
        return NULL;
    }
    if (code < 0 || code > 127) {
        PyErr_Format(PyExc_ValueError, "KeyEncoder: an extension type code is 0..127, not %d",
                     code);
        return NULL;
    }
    if (!PyCallable_Check(fallback)) {
        PyErr_SetString(PyExc_TypeError, "KeyEncoder: fallback must be callable");
        return NULL;
    }
    KeyEncoderObject *self = (KeyEncoderObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->code = (unsigned char)code;
    Py_INCREF(fallback);
    self->fallback = fallback;
    self->vectorcall = key_encoder_vectorcall;
    return (PyObject *)self;
}

static int
key_encoder_traverse(KeyEncoderObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->fallback);
    return 0;
}

static int
key_encoder_clear(KeyEncoderObject *self)
{
    Py_CLEAR(self->fallback);
    return 0;
}

static void
key_encoder_dealloc(KeyEncoderObject *self)
{
    PyObject_GC_UnTrack(self);
    key_encoder_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject KeyEncoder_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "objectspace.collections._core.KeyEncoder",
    .tp_doc = "KeyEncoder(code, fallback)\n--\n\n"
              "A key's stored bytes and exactness, as the serializer's raw_encode_key "
              "(``fallback``) gives them: a tuple of str, int (64 bits), bytes and None "
              "packed here in one pass, as msgpack extension type ``code``; any other "
              "key by ``fallback``.",
    .tp_basicsize = sizeof(KeyEncoderObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = key_encoder_new,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(KeyEncoderObject, vectorcall),
    .tp_traverse = (traverseproc)key_encoder_traverse,
    .tp_clear = (inquiry)key_encoder_clear,
    .tp_dealloc = (destructor)key_encoder_dealloc,
};

static PyObject *
core_untracked_set(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    return untracked_set();
}

static PyObject *
core_untrack(PyObject *module, PyObject *obj)
{
    if (PyObject_IS_GC(obj) && PyObject_GC_IsTracked(obj)) {
        PyObject_GC_UnTrack(obj);
    }
    Py_INCREF(obj);
    return obj;
}

/* ---- numbered_folders: each folder around its first decimal number -----------------------
   The match of ``(\D*)(0|[1-9][0-9]{0,17})(\D.*)?\Z`` (re.DOTALL; ``\D``: not a Unicode
   decimal digit, as ``str.isdecimal``) without a regular expression: the first decimal
   character must start a run of 1 to 18 ASCII digits without a leading zero (or be a lone
   "0") that ends the folder or is followed by a character that is not decimal. The
   template is the folder with the number replaced by NUL; a folder holding a NUL is not
   numbered. Consecutive folders of one template share one str object. */

static PyObject *
numbered_one(PyObject *folder, PyObject **last)
{
    if (!PyUnicode_Check(folder)) {
        PyErr_Format(PyExc_TypeError, "a folder name is a str, not %.100s", Py_TYPE(folder)->tp_name);
        return NULL;
    }
    Py_ssize_t n = PyUnicode_GET_LENGTH(folder);
    int kind = PyUnicode_KIND(folder);
    const void *data = PyUnicode_DATA(folder);
    Py_ssize_t i = 0;
    while (i < n) {
        Py_UCS4 ch = PyUnicode_READ(kind, data, i);
        if (ch == 0) {
            return PyTuple_New(0);
        }
        if (Py_UNICODE_ISDECIMAL(ch)) {
            break;
        }
        i++;
    }
    if (i == n) {
        return PyTuple_New(0);
    }
    Py_UCS4 first = PyUnicode_READ(kind, data, i);
    Py_ssize_t j = i + 1;
    unsigned long long number = first - '0';
    if (first < '0' || first > '9') {
        return PyTuple_New(0);
    }
    if (first != '0') {
        while (j < n && j - i < 18) {
            Py_UCS4 ch = PyUnicode_READ(kind, data, j);
            if (ch < '0' || ch > '9') {
                break;
            }
            number = number * 10 + (ch - '0');
            j++;
        }
    }
    if (j < n && Py_UNICODE_ISDECIMAL(PyUnicode_READ(kind, data, j))) {
        return PyTuple_New(0);
    }
    for (Py_ssize_t k = j; k < n; k++) {  /* a NUL after the number: not numbered either */
        if (PyUnicode_READ(kind, data, k) == 0) {
            return PyTuple_New(0);
        }
    }
    /* The template: the folder's characters before and after the number, a NUL between. */
    Py_ssize_t length = i + 1 + (n - j);
    PyObject *template = NULL;
    if (*last != NULL && PyUnicode_GET_LENGTH(*last) == length && PyUnicode_KIND(*last) == kind) {
        const char *a = (const char *)PyUnicode_DATA(*last);
        const char *b = (const char *)data;
        if (memcmp(a, b, (size_t)i * kind) == 0 && PyUnicode_READ(kind, a, i) == 0 &&
            memcmp(a + (i + 1) * kind, b + j * kind, (size_t)(n - j) * kind) == 0) {
            template = Py_NewRef(*last);
        }
    }
    if (template == NULL) {
        template = PyUnicode_New(length, PyUnicode_MAX_CHAR_VALUE(folder));
        if (template == NULL) {
            return NULL;
        }
        if (PyUnicode_CopyCharacters(template, 0, folder, 0, i) < 0 ||
            PyUnicode_WriteChar(template, i, 0) < 0 ||
            PyUnicode_CopyCharacters(template, i + 1, folder, j, n - j) < 0) {
            Py_DECREF(template);
            return NULL;
        }
        Py_XSETREF(*last, Py_NewRef(template));
    }
    PyObject *value = PyLong_FromUnsignedLongLong(number);
    if (value == NULL) {
        Py_DECREF(template);
        return NULL;
    }
    PyObject *pair = PyTuple_New(2);
    if (pair == NULL) {
        Py_DECREF(template);
        Py_DECREF(value);
        return NULL;
    }
    PyTuple_SET_ITEM(pair, 0, template);
    PyTuple_SET_ITEM(pair, 1, value);
    return pair;
}

static PyObject *
core_numbered_folders(PyObject *Py_UNUSED(module), PyObject *folders)
{
    PyObject *seq = PySequence_Fast(folders, "numbered_folders takes a sequence of folder names");
    if (seq == NULL) {
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = PyList_New(n);
    PyObject *last = NULL;
    if (out == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *found = numbered_one(PySequence_Fast_GET_ITEM(seq, k), &last);
        if (found == NULL) {
            Py_XDECREF(last);
            Py_DECREF(out);
            Py_DECREF(seq);
            return NULL;
        }
        PyList_SET_ITEM(out, k, found);
    }
    Py_XDECREF(last);
    Py_DECREF(seq);
    return out;
}

/* ---- datetime_from_ms: epoch milliseconds as an aware UTC datetime ---------------------
   For an exact int between 0001-01-01 and 9999-12-31T23:59:59.999 UTC (what a datetime
   holds): the datetime EPOCH + timedelta(milliseconds=ms) gives, built from the civil date
   of the day number (H. Hinnant's days_from_civil inverse). Anything else goes to
   ``fallback`` (which raises what the Python function raises). */

#define MS_PER_DAY 86400000LL
#define FIRST_MS (-62135596800000LL)  /* 0001-01-01T00:00:00 UTC */
#define LAST_MS 253402300799999LL     /* 9999-12-31T23:59:59.999 UTC */

static PyObject *
core_datetime_from_ms(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "datetime_from_ms takes two arguments (fallback, ms)");
        return NULL;
    }
    PyObject *ms_obj = args[1];
    if (PyLong_CheckExact(ms_obj)) {
        int overflow = 0;
        long long ms = PyLong_AsLongLongAndOverflow(ms_obj, &overflow);
        if (ms == -1 && PyErr_Occurred()) {
            return NULL;
        }
        if (!overflow && ms >= FIRST_MS && ms <= LAST_MS) {
            long long days = ms / MS_PER_DAY;
            long long rest = ms % MS_PER_DAY;
            if (rest < 0) {
                rest += MS_PER_DAY;
                days -= 1;
            }
            /* civil_from_days (days since 1970-01-01 to year, month, day) */
            long long z = days + 719468;
            long long era = (z >= 0 ? z : z - 146096) / 146097;
            long long doe = z - era * 146097;
            long long yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
            long long y = yoe + era * 400;
            long long doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
            long long mp = (5 * doy + 2) / 153;
            int d = (int)(doy - (153 * mp + 2) / 5 + 1);
            int m = (int)(mp < 10 ? mp + 3 : mp - 9);
            if (m <= 2) {
                y += 1;
            }
            int hour = (int)(rest / 3600000);
            int minute = (int)(rest / 60000 % 60);
            int second = (int)(rest / 1000 % 60);
            int usecond = (int)(rest % 1000) * 1000;
            return PyDateTimeAPI->DateTime_FromDateAndTime((int)y, m, d, hour, minute, second, usecond,
                                                           PyDateTime_TimeZone_UTC,
                                                           PyDateTimeAPI->DateTimeType);
        }
    }
    return PyObject_CallOneArg(args[0], ms_obj);
}

/* ---- row_columns: a block's rows as its columns ------------------------------------------
   The twin of objectspace.collections._pycore.row_columns: the same lists, in one pass per
   table. Keys and values are bytes (the values or ``deleted``); nothing here calls back
   into Python code, so the borrowed rows stay valid throughout. */

/* Whether ``key`` (bytes) is the canonical decimal form of an int of at most 18 digits
   (what ``len(key) <= 18 and key.isdigit() and b"%d" % int(key) == key`` says); its value
   in ``*out``. */
static int
canonical_int(PyObject *key, long long *out)
{
    Py_ssize_t n = PyBytes_GET_SIZE(key);
    const char *s = PyBytes_AS_STRING(key);
    if (n < 1 || n > 18 || (s[0] == '0' && n > 1)) {
        return 0;
    }
    long long v = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') {
            return 0;
        }
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 1;
}

/* Append a new reference (NULL: an error already set) to ``list``. */
static int
append_new(PyObject *list, PyObject *item)
{
    if (item == NULL) {
        return -1;
    }
    int rc = PyList_Append(list, item);
    Py_DECREF(item);
    return rc;
}

static int
append_ssize(PyObject *list, Py_ssize_t n)
{
    return append_new(list, PyLong_FromSsize_t(n));
}

/* ``fixed[width]``, created empty on first use (borrowed). */
static PyObject *
fixed_list(PyObject *fixed, Py_ssize_t width)
{
    PyObject *key = PyLong_FromSsize_t(width);
    if (key == NULL) {
        return NULL;
    }
    PyObject *same = PyDict_GetItemWithError(fixed, key);
    if (same == NULL && !PyErr_Occurred()) {
        same = PyList_New(0);
        if (same != NULL) {
            int rc = PyDict_SetItem(fixed, key, same);
            Py_DECREF(same);  /* the dict holds it */
            if (rc < 0) {
                same = NULL;
            }
        }
    }
    Py_DECREF(key);
    return same;
}

static int
row_type_error(const char *what, PyObject *obj)
{
    PyErr_Format(PyExc_TypeError, "row_columns: a row's %s is bytes, not %.100s", what,
                 Py_TYPE(obj)->tp_name);
    return -1;
}

enum { RC_COUNTS, RC_MODES, RC_INT_KEYS, RC_KEY_LENS, RC_KEYS, RC_WIDTHS, RC_FIXED,
       RC_VALUE_LENS, RC_VALUES, RC_LISTS };

/* One table's rows into the columns ``c``; -1 on an error. */
static int
table_columns(PyObject **c, PyObject *rows, int full, PyObject *deleted, Py_ssize_t *total)
{
    Py_ssize_t pos = 0, kept = 0, width = -1;
    PyObject *key, *value;
    int ints = 1, any_deleted = 0;
    long long prev = 0, number;
    /* First pass: the rows kept, whether every kept key is a canonical int and whether
       every kept value is a put of one width. */
    while (PyDict_Next(rows, &pos, &key, &value)) {
        if (!PyBytes_Check(key)) {
            return row_type_error("key", key);
        }
        if (value == deleted) {
            if (full) {
                continue;
            }
            any_deleted = 1;
        }
        else if (!PyBytes_Check(value)) {
            return row_type_error("value", value);
        }
        else if (width == -1) {
            width = PyBytes_GET_SIZE(value);
        }
        else if (width != PyBytes_GET_SIZE(value)) {
            width = -2;
        }
        if (ints && !canonical_int(key, &number)) {
            ints = 0;
        }
        kept++;
    }
    int fixed_width = !any_deleted && width > 0 && width <= 64;
    if (kept == 0) {
        ints = 0;
    }
    if (append_ssize(c[RC_COUNTS], kept) < 0 || append_ssize(c[RC_MODES], ints) < 0 ||
        append_ssize(c[RC_WIDTHS], fixed_width ? width : 0) < 0) {
        return -1;
    }
    *total += kept;
    PyObject *same = NULL;
    if (fixed_width && (same = fixed_list(c[RC_FIXED], width)) == NULL) {
        return -1;
    }
    pos = 0;
    while (PyDict_Next(rows, &pos, &key, &value)) {
        if (value == deleted && full) {
            continue;
        }
        if (ints) {
            canonical_int(key, &number);
            if (append_new(c[RC_INT_KEYS], PyLong_FromLongLong(number - prev)) < 0) {
                return -1;
            }
            prev = number;
        }
        else if (append_ssize(c[RC_KEY_LENS], PyBytes_GET_SIZE(key)) < 0 ||
                 PyList_Append(c[RC_KEYS], key) < 0) {
            return -1;
        }
        if (fixed_width) {
            if (PyList_Append(same, value) < 0) {
                return -1;
            }
        }
        else if (value == deleted) {
            if (append_ssize(c[RC_VALUE_LENS], -1) < 0) {
                return -1;
            }
        }
        else if (append_ssize(c[RC_VALUE_LENS], PyBytes_GET_SIZE(value)) < 0 ||
                 PyList_Append(c[RC_VALUES], value) < 0) {
            return -1;
        }
    }
    return 0;
}

/* rows_from_columns(names, columns): see objectspace.collections._pycore.rows_from_columns */
static PyObject *
core_rows_from_columns(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "rows_from_columns takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *names = args[0], *columns = args[1];
    if (!PyTuple_Check(names) || !PyList_Check(columns)) {
        PyErr_SetString(PyExc_TypeError, "rows_from_columns: names must be a tuple, columns a list");
        return NULL;
    }
    Py_ssize_t width = PyTuple_GET_SIZE(names);
    if (PyList_GET_SIZE(columns) != width || width == 0) {
        PyErr_SetString(PyExc_ValueError,
                        "rows_from_columns: one column per name, and at least one");
        return NULL;
    }
    Py_ssize_t n = -1;
    for (Py_ssize_t j = 0; j < width; j++) {
        PyObject *column = PyList_GET_ITEM(columns, j);
        if (!PyList_Check(column)) {
            PyErr_SetString(PyExc_TypeError, "rows_from_columns: each column must be a list");
            return NULL;
        }
        if (n >= 0 && PyList_GET_SIZE(column) != n) {
            PyErr_SetString(PyExc_ValueError, "rows_from_columns: columns of unequal lengths");
            return NULL;
        }
        n = PyList_GET_SIZE(column);
    }
    PyObject *rows = PyList_New(n);
    if (rows == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *row = _PyDict_NewPresized(width);
        if (row == NULL) {
            Py_DECREF(rows);
            return NULL;
        }
        PyList_SET_ITEM(rows, i, row);
        for (Py_ssize_t j = 0; j < width; j++) {
            /* (a column is a list the caller made: its length cannot change meanwhile) */
            PyObject *value = PyList_GET_ITEM(PyList_GET_ITEM(columns, j), i);
            if (PyDict_SetItem(row, PyTuple_GET_ITEM(names, j), value) < 0) {
                Py_DECREF(rows);
                return NULL;
            }
        }
    }
    return rows;
}

/* columns_from_rows(rows, names): see objectspace.collections._pycore.columns_from_rows */
static PyObject *
core_columns_from_rows(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "columns_from_rows takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *rows = args[0], *names = args[1];
    if (!PyList_Check(rows) || !PyTuple_Check(names)) {
        PyErr_SetString(PyExc_TypeError, "columns_from_rows: rows must be a list, names a tuple");
        return NULL;
    }
    Py_ssize_t width = PyTuple_GET_SIZE(names), n = PyList_GET_SIZE(rows);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyDict_Check(PyList_GET_ITEM(rows, i))) {
            PyErr_Format(PyExc_TypeError, "columns_from_rows: row %zd is not a dict", i);
            return NULL;
        }
    }
    PyObject *columns = PyList_New(width);
    if (columns == NULL) {
        return NULL;
    }
    for (Py_ssize_t j = 0; j < width; j++) {
        PyObject *column = PyList_New(n);
        if (column == NULL) {
            Py_DECREF(columns);
            return NULL;
        }
        PyList_SET_ITEM(columns, j, column);
        PyObject *name = PyTuple_GET_ITEM(names, j);
        for (Py_ssize_t i = 0; i < n; i++) {
            /* (the rows are the caller's list of dicts: a key's hash or equality could
               still run code, which cannot shorten this list the caller holds) */
            PyObject *value = PyDict_GetItemWithError(PyList_GET_ITEM(rows, i), name);
            if (value == NULL) {
                if (PyErr_Occurred()) {
                    Py_DECREF(columns);
                    return NULL;
                }
                value = Py_None;
            }
            PyList_SET_ITEM(column, i, Py_NewRef(value));
        }
    }
    return columns;
}

/* Days from 1970-01-01 to the proleptic Gregorian date y-m-d (H. Hinnant's days_from_civil). */
static long long
days_from_civil(long long y, unsigned m, unsigned d)
{
    y -= m <= 2;
    long long era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (long long)doe - 719468;
}

/* utc_micros(values): see objectspace.collections._pycore.utc_micros */
static PyObject *
core_utc_micros(PyObject *Py_UNUSED(module), PyObject *values)
{
    if (!PyList_Check(values)) {
        PyErr_SetString(PyExc_TypeError, "utc_micros takes a list");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(values);
    PyObject *out = PyList_New(n);
    if (out == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *value = PyList_GET_ITEM(values, i);
        if (value == Py_None) {
            PyList_SET_ITEM(out, i, Py_NewRef(Py_None));
            continue;
        }
        if (!PyDateTime_CheckExact(value)) {
            Py_DECREF(out);
            Py_RETURN_NONE;
        }
        PyObject *tz = PyDateTime_DATE_GET_TZINFO(value);
        if (tz != Py_None && tz != PyDateTime_TimeZone_UTC) {
            Py_DECREF(out);
            Py_RETURN_NONE;
        }
        long long days = days_from_civil(PyDateTime_GET_YEAR(value), PyDateTime_GET_MONTH(value),
                                         PyDateTime_GET_DAY(value));
        long long seconds = days * 86400 + PyDateTime_DATE_GET_HOUR(value) * 3600 +
                            PyDateTime_DATE_GET_MINUTE(value) * 60 +
                            PyDateTime_DATE_GET_SECOND(value);
        PyObject *micros =
            PyLong_FromLongLong(seconds * 1000000 + PyDateTime_DATE_GET_MICROSECOND(value));
        if (micros == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, micros);
    }
    return out;
}

static PyObject *
core_row_columns(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "row_columns takes 3 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *tables = args[0], *deleted = args[2];
    int full = PyObject_IsTrue(args[1]);
    if (full < 0) {
        return NULL;
    }
    if (!PyList_Check(tables)) {
        PyErr_Format(PyExc_TypeError, "row_columns takes a list of dicts, not %.100s",
                     Py_TYPE(tables)->tp_name);
        return NULL;
    }
    PyObject *c[RC_LISTS] = {NULL};
    PyObject *result = NULL;
    for (int i = 0; i < RC_LISTS; i++) {
        c[i] = i == RC_FIXED ? PyDict_New() : PyList_New(0);
        if (c[i] == NULL) {
            goto done;
        }
    }
    Py_ssize_t total = 0;
    for (Py_ssize_t t = 0; t < PyList_GET_SIZE(tables); t++) {
        PyObject *rows = PyList_GET_ITEM(tables, t);
        if (!PyDict_Check(rows)) {
            PyErr_Format(PyExc_TypeError, "row_columns: a table's rows are a dict, not %.100s",
                         Py_TYPE(rows)->tp_name);
            goto done;
        }
        if (table_columns(c, rows, full, deleted, &total) < 0) {
            goto done;
        }
    }
    result = Py_BuildValue("(OOOOOOOOOn)", c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7],
                           c[8], total);
done:
    for (int i = 0; i < RC_LISTS; i++) {
        Py_XDECREF(c[i]);
    }
    return result;
}

/* ---- table_heads, grouped_tables: a block's tables grouped by folder ------------------
   See objectspace.collections._pycore.table_heads and grouped_tables (their definition).
   A save names two or three tables per object (state/item/<id>/items, .../metadata), and
   a block groups them by folder: one pass over the names without a tuple or string per
   table (a table's folder is compared with the last one's in place, its last component
   with the few seen lately), then a counting placement by folder. */

#define TAILS_SEEN 8

/* Whether s[start:start+len] equals other. */
static int
substring_equals(PyObject *s, Py_ssize_t start, Py_ssize_t len, PyObject *other)
{
    if (PyUnicode_GET_LENGTH(other) != len) {
        return 0;
    }
    int kind = PyUnicode_KIND(s), other_kind = PyUnicode_KIND(other);
    const void *data = PyUnicode_DATA(s), *other_data = PyUnicode_DATA(other);
    if (kind == other_kind) {
        return memcmp((const char *)data + start * kind, other_data, (size_t)(len * kind)) == 0;
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        if (PyUnicode_READ(kind, data, start + i) != PyUnicode_READ(other_kind, other_data, i)) {
            return 0;
        }
    }
    return 1;
}

static PyObject *
core_table_heads(PyObject *Py_UNUSED(module), PyObject *names)
{
    if (!PyList_Check(names)) {
        PyErr_SetString(PyExc_TypeError, "table_heads: names must be a list");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(names);
    PyObject *heads = PyList_New(0), *index = PyDict_New(), *tails = PyDict_New();
    PyObject *table_head = PyList_New(n), *table_tail = PyList_New(n), *result = NULL;
    PyObject *seen[TAILS_SEEN] = {NULL}; /* borrowed from tails */
    Py_ssize_t last_head = -1, next_seen = 0;
    if (heads == NULL || index == NULL || tails == NULL || table_head == NULL || table_tail == NULL) {
        goto done;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *name = PyList_GET_ITEM(names, k);
        if (!PyUnicode_Check(name)) {
            PyErr_Format(PyExc_TypeError, "table_heads: a table name must be a str, not %.100s",
                         Py_TYPE(name)->tp_name);
            goto done;
        }
        Py_ssize_t len = PyUnicode_GET_LENGTH(name);
        Py_ssize_t slash = PyUnicode_FindChar(name, '/', 0, len, -1);
        if (slash == -2) {
            goto done;
        }
        Py_ssize_t head_len = slash < 0 ? 0 : slash, tail_start = slash + 1;
        /* the folder: the last one's again, or looked up */
        Py_ssize_t h = -1;
        if (last_head >= 0 && substring_equals(name, 0, head_len, PyList_GET_ITEM(heads, last_head))) {
            h = last_head;
        }
        else {
            PyObject *head = PyUnicode_Substring(name, 0, head_len);
            if (head == NULL) {
                goto done;
            }
            PyObject *found = PyDict_GetItemWithError(index, head);
            if (found != NULL) {
                h = PyLong_AsSsize_t(found);
            }
            else if (!PyErr_Occurred()) {
                PyObject *number = index_int(PyList_GET_SIZE(heads));
                if (number != NULL && PyDict_SetItem(index, head, number) == 0 &&
                    PyList_Append(heads, head) == 0) {
                    h = PyList_GET_SIZE(heads) - 1;
                }
                Py_XDECREF(number);
            }
            Py_DECREF(head);
            if (h < 0) {
                goto done;
            }
            last_head = h;
        }
        PyObject *number = index_int(h);
        if (number == NULL) {
            goto done;
        }
        PyList_SET_ITEM(table_head, k, number);
        /* the last component: one seen lately, or looked up (equal ones: one object) */
        PyObject *tail = NULL;
        Py_ssize_t tail_len = len - tail_start;
        for (int j = 0; j < TAILS_SEEN && seen[j] != NULL; j++) {
            if (substring_equals(name, tail_start, tail_len, seen[j])) {
                tail = seen[j];
                break;
            }
        }
        if (tail == NULL) {
            PyObject *fresh = tail_start == 0 ? Py_NewRef(name) : PyUnicode_Substring(name, tail_start, len);
            if (fresh == NULL) {
                goto done;
            }
            tail = PyDict_SetDefault(tails, fresh, fresh); /* borrowed */
            Py_DECREF(fresh);
            if (tail == NULL) {
                goto done;
            }
            seen[next_seen] = tail;
            next_seen = (next_seen + 1) % TAILS_SEEN;
        }
        PyList_SET_ITEM(table_tail, k, Py_NewRef(tail));
    }
    result = PyTuple_Pack(3, heads, table_head, table_tail);
done:
    Py_XDECREF(heads);
    Py_XDECREF(index);
    Py_XDECREF(tails);
    Py_XDECREF(table_head);
    Py_XDECREF(table_tail);
    return result;
}

static PyObject *
core_grouped_tables(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError,
                        "grouped_tables takes five arguments (edits, table_head, table_tail, order, full)");
        return NULL;
    }
    PyObject *edits = args[0], *table_head = args[1], *table_tail = args[2], *order = args[3];
    int full = PyObject_IsTrue(args[4]);
    if (full < 0) {
        return NULL;
    }
    if (!PyList_Check(edits) || !PyList_Check(table_head)) {
        PyErr_SetString(PyExc_TypeError, "grouped_tables: edits and table_head must be lists");
        return NULL;
    }
    if (!PyList_Check(table_tail) || (order != Py_None && !PyList_Check(order))) {
        PyErr_SetString(PyExc_TypeError, "grouped_tables: table_tail and order must be lists");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(edits);
    if (PyList_GET_SIZE(table_head) != n || PyList_GET_SIZE(table_tail) != n) {
        PyErr_SetString(PyExc_ValueError,
                        "grouped_tables: edits, table_head and table_tail differ in length");
        return NULL;
    }
    Py_ssize_t *head_of = PyMem_New(Py_ssize_t, n > 0 ? n : 1);
    Py_ssize_t *placed = PyMem_New(Py_ssize_t, n > 0 ? n : 1);
    Py_ssize_t *start = NULL, *rank = NULL, heads = 0;
    PyObject *head_tables = NULL, *tails = NULL, *table_tails = NULL, *truncated = NULL;
    PyObject *table_rows = NULL, *result = NULL;
    if (head_of == NULL || placed == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *h = PyList_GET_ITEM(table_head, i);
        Py_ssize_t v = PyLong_CheckExact(h) ? PyLong_AsSsize_t(h) : -1;
        if (v < 0) {
            if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_OverflowError)) {
                PyErr_Clear();
                PyErr_Format(PyExc_ValueError, "grouped_tables: folder index %R out of range", h);
            }
            goto done;
        }
        head_of[i] = v;
        if (v >= heads) {
            heads = v + 1;
        }
    }
    if (order != Py_None) {
        Py_ssize_t m = PyList_GET_SIZE(order);
        if (heads > m) {
            PyErr_Format(PyExc_ValueError, "grouped_tables: folder index %zd out of range", heads - 1);
            goto done;
        }
        heads = m;
    }
    rank = PyMem_New(Py_ssize_t, heads > 0 ? heads : 1);
    start = PyMem_New(Py_ssize_t, heads + 1);
    if (rank == NULL || start == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t h = 0; h < heads; h++) {
        rank[h] = -1;
    }
    for (Py_ssize_t r = 0; r < heads; r++) {
        Py_ssize_t h = r;
        if (order != Py_None) {
            PyObject *item = PyList_GET_ITEM(order, r);
            h = PyLong_CheckExact(item) ? PyLong_AsSsize_t(item) : -1;
            if (h == -1 && PyErr_Occurred()) {
                PyErr_Clear();
            }
            if (h < 0 || h >= heads || rank[h] >= 0) {
                PyErr_SetString(PyExc_ValueError,
                                "grouped_tables: order must hold each folder's index once");
                goto done;
            }
        }
        rank[h] = r;
    }
    /* counting placement: per rank its tables, in their order */
    for (Py_ssize_t r = 0; r <= heads; r++) {
        start[r] = 0;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        start[rank[head_of[i]] + 1]++;
    }
    head_tables = PyList_New(heads);
    if (head_tables == NULL) {
        goto done;
    }
    for (Py_ssize_t r = 0; r < heads; r++) {
        PyObject *count = index_int(start[r + 1]);
        if (count == NULL) {
            goto done;
        }
        PyList_SET_ITEM(head_tables, r, count);
        start[r + 1] += start[r];
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        placed[start[rank[head_of[i]]]++] = i;
    }
    tails = PyDict_New();
    table_tails = PyList_New(n);
    truncated = PyList_New(0);
    table_rows = PyList_New(n);
    if (tails == NULL || table_tails == NULL || truncated == NULL || table_rows == NULL) {
        goto done;
    }
    PyObject *last_tail = NULL, *last_id = NULL; /* borrowed */
    for (Py_ssize_t k = 0; k < n; k++) {
        Py_ssize_t i = placed[k];
        PyObject *change = PyList_GET_ITEM(edits, i), *tail = PyList_GET_ITEM(table_tail, i);
        if (tail != last_tail) {
            PyObject *id = PyDict_GetItemWithError(tails, tail);
            if (id == NULL) {
                if (PyErr_Occurred()) {
                    goto done;
                }
                PyObject *fresh = PyLong_FromSsize_t(PyDict_GET_SIZE(tails));
                if (fresh == NULL || PyDict_SetItem(tails, tail, fresh) < 0) {
                    Py_XDECREF(fresh);
                    goto done;
                }
                Py_DECREF(fresh);
                id = fresh; /* held by the dict */
            }
            last_tail = tail;
            last_id = id;
        }
        PyList_SET_ITEM(table_tails, k, Py_NewRef(last_id));
        PyObject *rows = PyObject_GetAttr(change, str_rows);
        if (rows == NULL) {
            goto done;
        }
        PyList_SET_ITEM(table_rows, k, rows);
        if (!full) {
            PyObject *flag = PyObject_GetAttr(change, str_truncated);
            int is_truncated = flag == NULL ? -1 : PyObject_IsTrue(flag);
            Py_XDECREF(flag);
            if (is_truncated < 0) {
                goto done;
            }
            if (is_truncated) {
                PyObject *at = index_int(k);
                if (at == NULL || PyList_Append(truncated, at) < 0) {
                    Py_XDECREF(at);
                    goto done;
                }
                Py_DECREF(at);
            }
        }
    }
    result = PyTuple_Pack(5, head_tables, tails, table_tails, truncated, table_rows);
done:
    PyMem_Free(head_of);
    PyMem_Free(placed);
    PyMem_Free(rank);
    PyMem_Free(start);
    Py_XDECREF(head_tables);
    Py_XDECREF(tails);
    Py_XDECREF(table_tails);
    Py_XDECREF(truncated);
    Py_XDECREF(table_rows);
    return result;
}

static PyMethodDef core_functions[] = {
    {"table_heads", core_table_heads, METH_O,
     "table_heads($module, names, /)\n--\n\n"
     "Each table name's folder and last component: see "
     "objectspace.collections._pycore.table_heads."},
    {"grouped_tables", (PyCFunction)(void (*)(void))core_grouped_tables, METH_FASTCALL,
     "grouped_tables($module, edits, table_head, table_tail, order, full, /)\n--\n\n"
     "The tables grouped by folder in order: see "
     "objectspace.collections._pycore.grouped_tables."},
    {"untracked_set", core_untracked_set, METH_NOARGS,
     "untracked_set($module, /)\n--\n\n"
     "A new empty set the cyclic collector does not track (for an object's dirty slots)."},
    {"untrack", core_untrack, METH_O,
     "untrack($module, obj, /)\n--\n\n"
     "``obj``, no longer tracked by the cyclic collector (only for an object that can never "
     "be part of a reference cycle)."},
    {"emit_sorted_rows", (PyCFunction)(void (*)(void))core_emit_sorted_rows, METH_FASTCALL,
     "emit_sorted_rows(rows, slots, data, sorted_list, cleared, dumps, encode_key, prefix, "
     "pack_entry, deleted, unencodable) -> None\n--\n\n"
     "A sorted dict's changed entries as rows: see "
     "objectspace.collections._pycore.emit_sorted_rows."},
    {"value_setup", (PyCFunction)(void (*)(void))core_value_setup, METH_FASTCALL,
     "value_setup($module, pages, table_changes, /)\n--\n\n"
     "The shared pages ([new][meta]) and TableChanges type of ValueBase._save_value."},
    {"emit_set_rows", (PyCFunction)(void (*)(void))core_emit_set_rows, METH_FASTCALL,
     "emit_set_rows(rows, slots, members, spell, cleared, key_dumps, encode_key, plain, "
     "entry_mark, spelled, dumps, deleted, unencodable) -> None\n--\n\n"
     "A set's changed elements as rows: see objectspace.collections._pycore.emit_set_rows."},
    {"emit_rows", (PyCFunction)(void (*)(void))core_emit_rows, METH_FASTCALL,
     "emit_rows(rows, slots, data, order, key_dumps, dumps, pack_uint, plain, prefixes, "
     "entry_mark, deleted, encode_key, unencodable) -> bool\n--\n\n"
     "A dict's changed entries as rows: see objectspace.collections._pycore.emit_rows."},
    {"datetime_from_ms", (PyCFunction)(void (*)(void))core_datetime_from_ms, METH_FASTCALL,
     "datetime_from_ms($module, fallback, ms, /)\n--\n\n"
     "Epoch milliseconds ``ms`` (an int within datetime's range) as an aware UTC datetime; "
     "anything else is ``fallback(ms)``."},
    {"sorted_between", (PyCFunction)(void (*)(void))core_sorted_between, METH_FASTCALL,
     "sorted_between($module, sorted_list, low, high, /)\n--\n\n"
     "The elements x of a sortedcontainers SortedList with low <= x < high, ascending: see "
     "objectspace.collections._pycore.sorted_between."},
    {"sorted_insert", (PyCFunction)(void (*)(void))core_sorted_insert, METH_FASTCALL,
     "sorted_insert($module, sorted_list, value, /)\n--\n\n"
     "sortedcontainers' SortedList.add(value) with its bisections and insertion in C: see "
     "objectspace.collections._pycore.sorted_insert."},
    {"rows_from_columns", (PyCFunction)(void (*)(void))core_rows_from_columns, METH_FASTCALL,
     "rows_from_columns($module, names, columns, /)\n--\n\n"
     "A dict per row of equal-length column lists: see "
     "objectspace.collections._pycore.rows_from_columns."},
    {"columns_from_rows", (PyCFunction)(void (*)(void))core_columns_from_rows, METH_FASTCALL,
     "columns_from_rows($module, rows, names, /)\n--\n\n"
     "A list per name of the rows' values (None where a row lacks it): see "
     "objectspace.collections._pycore.columns_from_rows."},
    {"utc_micros", core_utc_micros, METH_O,
     "utc_micros($module, values, /)\n--\n\n"
     "Datetimes (naive or in UTC) and Nones as microseconds since the epoch, or None: see "
     "objectspace.collections._pycore.utc_micros."},
    {"row_columns", (PyCFunction)(void (*)(void))core_row_columns, METH_FASTCALL,
     "row_columns($module, table_rows, full, deleted, /)\n--\n\n"
     "The rows of a block's tables as the block's columns: see "
     "objectspace.collections._pycore.row_columns."},
    {"sorted_remove", (PyCFunction)(void (*)(void))core_sorted_remove, METH_FASTCALL,
     "sorted_remove($module, sorted_list, value, /)\n--\n\n"
     "sortedcontainers' SortedList.remove(value) with its bisections and deletion in C: see "
     "objectspace.collections._pycore.sorted_remove."},
    {"sorted_set_add", (PyCFunction)(void (*)(void))core_sorted_set_add, METH_FASTCALL,
     "sorted_set_add($module, self, value, plain, /)\n--\n\n"
     "PersistedSortedSet.add(value), the set's bookkeeping in C: see "
     "objectspace.collections._pycore.sorted_set_add."},
    {"sorted_set_discard", (PyCFunction)(void (*)(void))core_sorted_set_discard, METH_FASTCALL,
     "sorted_set_discard($module, self, value, /)\n--\n\n"
     "PersistedSortedSet.discard(value), the set's bookkeeping in C: see "
     "objectspace.collections._pycore.sorted_set_discard."},
    {"numbered_folders", core_numbered_folders, METH_O,
     "numbered_folders($module, folders, /)\n--\n\n"
     "Each folder as (template, number) around its first decimal number, or (): see "
     "objectspace.collections._pycore.numbered_folders."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef core_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "objectspace.collections._core",
    .m_doc = "The fields and hot methods of the persisted types, in C "
             "(the twin of objectspace.collections._pycore).",
    .m_size = -1,
    .m_methods = core_functions,
};

PyMODINIT_FUNC
PyInit__core(void)
{
    PyObject *module = NULL, *copyreg = NULL, *collections = NULL;

    if (intern(&str_touch, "_touch") < 0 || intern(&str_value, "value") < 0 || intern(&str_add, "add") < 0 ||
        intern(&str_append, "append") < 0 || intern(&str_popleft, "popleft") < 0 ||
        intern(&str_pop, "pop") < 0 || intern(&str_getstate, "__getstate__") < 0 ||
        intern(&str_dict, "__dict__") < 0 || intern(&str_delitem, "__delitem__") < 0 ||
        intern(&str_maxes, "_maxes") < 0 || intern(&str_lists, "_lists") < 0 ||
        intern(&str_load, "_load") < 0 || intern(&str_index, "_index") < 0 ||
        intern(&str_len, "_len") < 0 || intern(&str_expand, "_expand") < 0 ||
        intern(&str_data, "_data") < 0 || intern(&str_set, "_set") < 0 ||
        intern(&str_list, "_list") < 0 || intern(&str_spell, "_spell") < 0 ||
        intern(&str_rewrite_all, "_rewrite_all") < 0 ||
        intern(&str_changes, "changes") < 0 || intern(&str_dumps, "dumps") < 0 ||
        intern(&str_rows, "rows") < 0 || intern(&str_truncated, "truncated") < 0 ||
        intern(&str_new, "new") < 0 || intern(&str_meta, "meta") < 0) {
        goto error;
    }
    PyDateTime_IMPORT;
    if (PyDateTimeAPI == NULL) {
        goto error;
    }
    int_zero = PyLong_FromLong(0);
    int_one = PyLong_FromLong(1);
    int_minus_one = PyLong_FromLong(-1);
    if (int_zero == NULL || int_one == NULL || int_minus_one == NULL) {
        goto error;
    }
    copyreg = PyImport_ImportModule("copyreg");
    if (copyreg == NULL) {
        goto error;
    }
    copyreg_newobj = PyObject_GetAttrString(copyreg, "__newobj__");
    copyreg_slotnames = PyObject_GetAttrString(copyreg, "_slotnames");
    if (copyreg_newobj == NULL || copyreg_slotnames == NULL) {
        goto error;
    }
    collections = PyImport_ImportModule("collections");
    if (collections == NULL) {
        goto error;
    }
    deque_type = (PyTypeObject *)PyObject_GetAttrString(collections, "deque");
    if (deque_type == NULL) {
        goto error;
    }
    if (!PyType_Check(deque_type)) {
        PyErr_SetString(PyExc_TypeError, "collections.deque is not a type");
        goto error;
    }
    if (fast_method_init(&deque_append, deque_type, "append") < 0 ||
        fast_method_init(&deque_popleft, deque_type, "popleft") < 0 ||
        fast_method_init(&list_pop, &PyList_Type, "pop") < 0) {
        goto error;
    }

    module = PyModule_Create(&core_module);
    if (module == NULL) {
        goto error;
    }
    if (add_type(module, &ObjectBase_Type) < 0 || add_type(module, &ValueBase_Type) < 0 ||
        add_type(module, &ArrayBase_Type) < 0 || add_type(module, &ListBase_Type) < 0 ||
        add_type(module, &QueueBase_Type) < 0 || add_type(module, &StackBase_Type) < 0) {
        goto error;
    }
    /* An array has no __delitem__ (del a[i] fails as on a class without one); the slot
       that implements __setitem__ would otherwise also expose it. */
    if (PyDict_DelItem(ArrayBase_Type.tp_dict, str_delitem) < 0) {
        goto error;
    }
    PyType_Modified(&ArrayBase_Type);
    if (PyType_Ready(&KeyEncoder_Type) < 0 ||
        PyModule_AddObjectRef(module, "KeyEncoder", (PyObject *)&KeyEncoder_Type) < 0) {
        goto error;
    }
    value_descr = PyDict_GetItemWithError(ValueBase_Type.tp_dict, str_value);
    if (value_descr == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_SystemError, "ValueBase has no 'value' descriptor");
        }
        goto error;
    }
    Py_INCREF(value_descr);
    Py_DECREF(copyreg);
    Py_DECREF(collections);
    return module;

error:
    Py_XDECREF(copyreg);
    Py_XDECREF(collections);
    Py_XDECREF(module);
    return NULL;
}
