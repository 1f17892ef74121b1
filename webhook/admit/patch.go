package admit

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"gomodules.xyz/jsonpatch/v2"
)

// typedPatch returns the JSON patch (RFC 6902) that turns the JSON of orig
// into the JSON of mutated, two values of the same Go type, found by
// walking both values field by field under their JSON names.
//
// It does what controller-runtime's defaulter does by marshalling the
// mutated object and diffing two JSON documents, without the JSON: that
// round trip was a third of the webhook's CPU in the admission benchmark
// (bench/notes.md). The promises:
//   - only what differs is written: a struct is descended into, never
//     replaced, so members of the request that this build's types do not
//     know are never touched (the framework's default is the same: it
//     drops the removals such members would cause);
//   - a slice keeps the elements the two share, compared in place, then
//     gets the new ones appended or the surplus removed from its end;
//   - the result is deterministic (map keys sorted) and empty when the two
//     are deeply equal.
//
// Values whose type marshals itself (json.Marshaler: times, quantities,
// int-or-strings) are compared as a whole.
func typedPatch(orig, mutated any) ([]jsonpatch.JsonPatchOperation, error) {
	a, b := reflect.ValueOf(orig), reflect.ValueOf(mutated)
	if a.Type() != b.Type() {
		return nil, fmt.Errorf("typed patch: %s and %s are not the same type", a.Type(), b.Type())
	}
	var d differ
	d.value("", a, b, false)
	return d.ops, nil
}

type differ struct {
	ops []jsonpatch.JsonPatchOperation
}

var marshalerType = reflect.TypeFor[json.Marshaler]()

func marshalsItself(t reflect.Type) bool {
	return t.Implements(marshalerType) || reflect.PointerTo(t).Implements(marshalerType)
}

// set writes v at path: "add" for an object member (it replaces an
// existing member and creates a missing one), "replace" for an array
// element.
func (d *differ) set(path string, member bool, v reflect.Value) {
	op := "replace"
	if member {
		op = "add"
	}
	d.ops = append(d.ops, jsonpatch.NewOperation(op, path, v.Interface()))
}

func (d *differ) remove(path string) {
	d.ops = append(d.ops, jsonpatch.NewOperation("remove", path, nil))
}

// value writes the difference between a and b, both at path (an object
// member when member is true, else an array element or the root).
func (d *differ) value(path string, a, b reflect.Value, member bool) {
	if equal(a, b) {
		return
	}
	if marshalsItself(b.Type()) {
		d.set(path, member, b)
		return
	}
	switch b.Kind() {
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			d.set(path, member, b)
			return
		}
		d.value(path, a.Elem(), b.Elem(), member)
	case reflect.Struct:
		d.fields(path, a, b)
	case reflect.Slice:
		if b.Type().Elem().Kind() == reflect.Uint8 || a.Len() == 0 || b.Len() == 0 {
			d.set(path, member, b) // base64 text, or from or to empty (or null)
			return
		}
		n := min(a.Len(), b.Len())
		for i := range n {
			d.value(path+"/"+strconv.Itoa(i), a.Index(i), b.Index(i), false)
		}
		for i := n; i < b.Len(); i++ {
			d.ops = append(d.ops, jsonpatch.NewOperation("add", path+"/-", b.Index(i).Interface()))
		}
		for i := a.Len() - 1; i >= n; i-- {
			d.remove(path + "/" + strconv.Itoa(i))
		}
	case reflect.Map:
		if b.Type().Key().Kind() != reflect.String || a.Len() == 0 || b.Len() == 0 {
			d.set(path, member, b)
			return
		}
		keys := func(m reflect.Value) []string {
			out := make([]string, 0, m.Len())
			for _, k := range m.MapKeys() {
				out = append(out, k.String())
			}
			slices.Sort(out)
			return out
		}
		for _, k := range keys(b) {
			kv := reflect.ValueOf(k).Convert(b.Type().Key())
			if av := a.MapIndex(kv); av.IsValid() {
				d.value(path+"/"+escape(k), av, b.MapIndex(kv), true)
			} else {
				d.set(path+"/"+escape(k), true, b.MapIndex(kv))
			}
		}
		for _, k := range keys(a) {
			if !b.MapIndex(reflect.ValueOf(k).Convert(b.Type().Key())).IsValid() {
				d.remove(path + "/" + escape(k))
			}
		}
	default: // strings, numbers, booleans, interfaces
		d.set(path, member, b)
	}
}

// equal is reflect.DeepEqual, through pointers where it can be, so that
// no struct is copied to compare it.
func equal(a, b reflect.Value) bool {
	if a.CanAddr() && b.CanAddr() {
		return reflect.DeepEqual(a.Addr().Interface(), b.Addr().Interface())
	}
	return reflect.DeepEqual(a.Interface(), b.Interface())
}

// fields walks a struct's fields as encoding/json lays them out.
func (d *differ) fields(path string, a, b reflect.Value) {
	t := b.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" && opts == "" {
			continue
		}
		fa, fb := a.Field(i), b.Field(i)
		// Embedded structs without a name, and k8s' ",inline", are laid out
		// in the parent.
		if name == "" && (f.Anonymous || strings.Contains(opts, "inline")) && fb.Kind() == reflect.Struct {
			d.fields(path, fa, fb)
			continue
		}
		if name == "" {
			name = f.Name
		}
		p := path + "/" + escape(name)
		goneA, goneB := omitted(fa, opts), omitted(fb, opts)
		switch {
		case goneA && goneB:
		case goneB:
			d.remove(p)
		case goneA:
			d.set(p, true, fb)
		default:
			d.value(p, fa, fb, true)
		}
	}
}

// omitted tells whether encoding/json leaves the field out.
func omitted(v reflect.Value, opts string) bool {
	for o := range strings.SplitSeq(opts, ",") {
		switch o {
		case "omitempty":
			switch v.Kind() {
			case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
				if v.Len() == 0 {
					return true
				}
			case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
				reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
				reflect.Float32, reflect.Float64, reflect.Interface, reflect.Pointer:
				if v.IsZero() {
					return true
				}
			}
		case "omitzero":
			if v.Kind() == reflect.Pointer && v.IsNil() {
				return true
			}
			if z, ok := v.Interface().(interface{ IsZero() bool }); ok {
				if z.IsZero() {
					return true
				}
			} else if v.IsZero() {
				return true
			}
		}
	}
	return false
}

// escape makes s one JSON-pointer token (RFC 6901).
func escape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
