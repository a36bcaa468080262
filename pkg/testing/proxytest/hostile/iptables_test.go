package hostile

import (
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/iptables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

func newIPT(family proxy.IPFamily) backend {
	fake := kiptables.NewFake()
	p := iptables.NewWithInterface(family, fake, iptables.Options{})
	return backend{
		name: "iptables",
		sync: func(st *desired.State) error { st = localhostDNAT(st); return p.Sync(ctx, st, proxytest.ModeOf(st)) },
		check: func(t reporter, st *desired.State) {
			t.Helper()
			checkRestores(t, "iptables", st.Family, fake)
		},
	}
}

// localhostDNAT is st as desired decides it in iptables mode by default
// (localhostNodePorts): IPv4 node ports answer on 127.0.0.0/8 too, so that
// the hostile Services also reach the localhost rules.
func localhostDNAT(st *desired.State) *desired.State {
	if st.Family != proxy.IPv4 {
		return st
	}
	out := *st
	out.NodePorts.Localhost = desired.LocalhostDNAT
	return &out
}

// checkRestores checks every iptables-restore input the fake received
// since the last check: each line is a table, chain, rule (appended or
// inserted), delete or COMMIT line (nothing injected), comments are quoted, and every address
// argument is of family, in plain form.
func checkRestores(t reporter, backend string, family proxy.IPFamily, fake *kiptables.Fake) {
	t.Helper()
	for _, data := range fake.Restores {
		for n, line := range strings.Split(string(data), "\n") {
			if err := checkRestoreLine(family, line); err != nil {
				t.Errorf("%s %s: restore line %d %q: %v", backend, family, n+1, line, err)
			}
		}
	}
	fake.Restores = nil
}

func checkRestoreLine(family proxy.IPFamily, line string) error {
	switch {
	case line == "", line == "COMMIT", line[0] == '*', line[0] == ':', line[0] == '#':
		if strings.ContainsAny(line, "\r%") {
			return fmt.Errorf("odd character")
		}
		return nil
	case strings.HasPrefix(line, "-X "):
		return nil
	case !strings.HasPrefix(line, "-A ") && !strings.HasPrefix(line, "-I "):
		// -I: a full sync inserts missing jumps at the front of the
		// built-in chains in the same restore.
		return fmt.Errorf("not a restore command (injected line?)")
	}
	if strings.ContainsAny(line, "\r%") {
		return fmt.Errorf("odd character")
	}
	if err := checkComments(line); err != nil {
		return err
	}
	words := kiptables.SplitRule(line)
	for i := 0; i+1 < len(words); i++ {
		arg := words[i+1]
		var err error
		switch words[i] {
		case "-s", "-d", "--source", "--destination":
			err = checkPrefixArg(family, strings.TrimPrefix(arg, "!"))
		case "--to-destination":
			err = checkAddrPortArg(family, arg)
		case "--dport", "--sport":
			if n, e := strconv.Atoi(arg); e != nil || n < 1 || n > 65535 {
				err = fmt.Errorf("port %q", arg)
			}
		}
		if err != nil {
			return fmt.Errorf("%s %s: %w", words[i], arg, err)
		}
	}
	return nil
}

// checkComments: every --comment argument is one quoted string, or one
// plain word (upstream leaves "ns/svc:port" unquoted): nothing in it can
// end the rule or start another argument.
func checkComments(line string) error {
	rest := line
	for {
		i := strings.Index(rest, "--comment ")
		if i < 0 {
			return nil
		}
		rest = rest[i+len("--comment "):]
		if strings.HasPrefix(rest, `"`) {
			end := strings.IndexByte(rest[1:], '"')
			if end < 0 {
				return fmt.Errorf("unterminated comment")
			}
			rest = rest[1+end+1:]
			continue
		}
		word, _, _ := strings.Cut(rest, " ")
		if !plainComment.MatchString(word) {
			return fmt.Errorf("unquoted comment %q", word)
		}
	}
}

var plainComment = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9/:._-]*$`)

func checkPrefixArg(family proxy.IPFamily, arg string) error {
	if a, err := netip.ParseAddr(arg); err == nil {
		return checkAddr(family, a)
	}
	p, err := netip.ParsePrefix(arg)
	if err != nil {
		return fmt.Errorf("not an address or prefix")
	}
	if err := checkAddr(family, p.Addr()); err != nil {
		return err
	}
	if p != p.Masked() {
		return fmt.Errorf("host bits set")
	}
	return nil
}

func checkAddrPortArg(family proxy.IPFamily, arg string) error {
	ap, err := netip.ParseAddrPort(arg)
	if err != nil {
		return fmt.Errorf("not address:port")
	}
	if ap.Port() == 0 {
		return fmt.Errorf("port 0")
	}
	return checkAddr(family, ap.Addr())
}
