package nftables

// SetOwnSlots sets p's config.ownSlots, so that the external kernel tests
// can give small Services with several external frontends chains of
// their own (0: every one).
func SetOwnSlots(p *Proxier, n int) { p.ownSlots = n }
