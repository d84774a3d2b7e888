package doh

import "github.com/dohfwd/dohfwd/engine"

// PaddingBlock is the block length responses are padded to (RFC 8467,
// section 4.1: the recommended Block-Length Padding for responses).
const PaddingBlock = engine.PaddingBlock
