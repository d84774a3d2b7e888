package dnsserver

import "syscall"

// errTooManyFiles is accept's error when the process is out of file
// descriptors: worth waiting out, not a reason to stop serving.
var errTooManyFiles = syscall.EMFILE
