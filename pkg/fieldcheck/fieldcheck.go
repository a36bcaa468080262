// Package fieldcheck finds the fields a hand-written comparison forgets. A
// test hands it a struct type's comparison (desired.ServicePort.Equal,
// State.SameGlobals, the syncer's sameNode) and gets back every field whose
// change the comparison does not notice, so that a field added to the
// struct and not to its comparison fails the test. It is for tests only.
package fieldcheck

import (
	"net/netip"
	"reflect"
	"slices"
	"strings"
)

// Uncompared returns, sorted, the dotted paths of the exported fields of T
// (descending into nested structs) whose change leaves equal(zero, changed)
// true. A field of a type it cannot change (a map, a chan, a func, an
// unexported struct) is reported too, as "path (cannot change)", so that the
// test learns of it instead of silently passing.
func Uncompared[T any](equal func(a, b T) bool) []string {
	var out []string
	var zero T
	for _, path := range leaves(reflect.TypeOf(zero), nil) {
		changed := zero
		if !change(reflect.ValueOf(&changed).Elem().FieldByIndex(path.index)) {
			out = append(out, path.name+" (cannot change)")
			continue
		}
		if equal(zero, changed) {
			out = append(out, path.name)
		}
	}
	slices.Sort(out)
	return out
}

type leaf struct {
	name  string
	index []int
}

// leaves lists the exported fields of struct type t that change treats as
// one value: everything but nested structs, which it descends into.
func leaves(t reflect.Type, prefix []string) []leaf {
	var out []leaf
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name := append(slices.Clone(prefix), f.Name)
		if f.Type.Kind() == reflect.Struct && !atomic(f.Type) {
			inner := leaves(f.Type, name)
			for _, l := range inner {
				out = append(out, leaf{name: l.name, index: append([]int{i}, l.index...)})
			}
			if len(inner) > 0 {
				continue
			}
			// Opaque (no exported field, e.g. model.PortMap): one leaf,
			// which change cannot set, so it is reported, not skipped.
		}
		out = append(out, leaf{name: strings.Join(name, "."), index: []int{i}})
	}
	return out
}

// atomic types are structs compared as one value.
func atomic(t reflect.Type) bool {
	return t == reflect.TypeFor[netip.Addr]() || t == reflect.TypeFor[netip.Prefix]()
}

// change sets v, a zero value, to some other value; false if it cannot.
func change(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(1)
	case reflect.String:
		v.SetString("x")
	case reflect.Slice:
		// One element, itself changed where possible: a nil slice and
		// one of a zero element already differ in length.
		s := reflect.MakeSlice(v.Type(), 1, 1)
		change(s.Index(0))
		v.Set(s)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
	case reflect.Struct:
		switch v.Type() {
		case reflect.TypeFor[netip.Addr]():
			v.Set(reflect.ValueOf(netip.MustParseAddr("192.0.2.1")))
		case reflect.TypeFor[netip.Prefix]():
			v.Set(reflect.ValueOf(netip.MustParsePrefix("192.0.2.0/24")))
		default:
			return false
		}
	default:
		return false
	}
	return true
}
