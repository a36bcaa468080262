package desired

// PortSettings is a mode's own decision for each service port, one that
// only the mode's backend reads (IPVS mode's scheduler). The mode's row
// supplies it (Options.PortSettings) and the backend package owns it;
// Compute asks it for every port it computes, so that the setting is
// recomputed, shared and compared with the port's other decisions, while
// desired knows nothing of what it means. Policy, which every backend and
// Evaluate share, is never a setting.
type PortSettings interface {
	// PortSetting decides for a port of a Service with these extension
	// annotations (model.ServicePort.Extensions, nil when none; never to
	// be modified). Ports with equal settings may share one pointer.
	PortSetting(extensions map[string]string) *PortSetting
}

// PortSetting is one port's decision by a mode's PortSettings.
type PortSetting struct {
	// Value is what the mode's backend reads.
	Value string
	// Refused is an annotation value the mode ignored ("" if none), kept
	// so that the Service's owner can be told (the mode's row words the
	// Event) and explain can say why Value is not what was asked.
	Refused string
}

// portSetting returns the setting of a port of a Service with these
// extension annotations under settings; nil when the mode has none.
func portSetting(settings PortSettings, extensions map[string]string) *PortSetting {
	if settings == nil {
		return nil
	}
	return settings.PortSetting(extensions)
}

// equalSettings compares two settings by value: ports need not share one.
func equalSettings(a, b *PortSetting) bool {
	return a == b || (a != nil && b != nil && *a == *b)
}
