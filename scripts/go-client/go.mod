module naradcheck

go 1.23.0

require github.com/debanganthakuria/narad-go v0.0.0

// run.sh adds, in a temporary copy of this module, a replace directive
// pointing at a local checkout of the client, so nothing machine-specific
// lives here.
