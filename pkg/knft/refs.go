package knft

import (
	"regexp"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/pkg/knetlink"
)

// A rule's references are the named sets, maps and chains it reads or
// jumps to: whoever replaces one of them (deletes it and adds it again
// with another type) must rewrite the rules that name it in the same
// transaction, as the kernel refuses to delete an object a rule still
// uses. Anonymous sets ("{ … }", which the kernel names "__set%d" and
// "__map%d") are part of their rule and left out, with whatever chains
// their elements name.

// ruleRefs returns the references of a rule's expressions
// (NFTA_RULE_EXPRESSIONS): the set of a lookup ("@x", "vmap @x", "map
// @x") or of a dynset ("update @x"), the chain of a jump or goto; each
// name once, in order.
func ruleRefs(exprs []byte) []string {
	var refs []string
	list := knetlink.Attrs{B: exprs}
	for _, elem, ok := list.Next(); ok; _, elem, ok = list.Next() {
		data := knetlink.Find(elem, unix.NFTA_EXPR_DATA)
		var name []byte
		switch knetlink.CString(knetlink.Find(elem, unix.NFTA_EXPR_NAME)) {
		case "lookup":
			name = knetlink.Find(data, unix.NFTA_LOOKUP_SET)
		case "dynset":
			name = knetlink.Find(data, unix.NFTA_DYNSET_SET_NAME)
		case "immediate":
			verdict := knetlink.Find(knetlink.Find(data, unix.NFTA_IMMEDIATE_DATA), unix.NFTA_DATA_VERDICT)
			name = knetlink.Find(verdict, unix.NFTA_VERDICT_CHAIN)
		}
		refs = addRef(refs, knetlink.CString(name))
	}
	return refs
}

func addRef(refs []string, name string) []string {
	if name == "" || strings.HasPrefix(name, "__") || slices.Contains(refs, name) {
		return refs
	}
	return append(refs, name)
}

var (
	// refText finds "@set" and "jump chain" / "goto chain" in a rule.
	refText = regexp.MustCompile(`@([^\s,;{}]+)|\b(?:jump|goto) ([^\s,;{}]+)`)
	// anonText is an anonymous set or map written out in a rule.
	anonText = regexp.MustCompile(`\{[^{}]*\}`)
)

// RuleRefs returns the references of a rule written in nft's syntax, as
// the kernel's read-back reports them once nft added it: each name once,
// in order, anonymous sets and maps (and the chains their elements name)
// left out.
func RuleRefs(rule string) []string {
	var refs []string
	for _, m := range refText.FindAllStringSubmatch(anonText.ReplaceAllString(rule, ""), -1) {
		refs = addRef(refs, m[1]+m[2])
	}
	return refs
}
