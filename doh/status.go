package doh

// The HTTP statuses and methods the core speaks, under its own names: the
// core builds without net/http, which the WebAssembly module does not
// link (it would bring crypto/tls). The values are net/http's.
const (
	statusOK                    = 200
	statusBadRequest            = 400
	statusUnauthorized          = 401
	statusForbidden             = 403
	statusNotFound              = 404
	statusMethodNotAllowed      = 405
	statusRequestEntityTooLarge = 413
	statusURITooLong            = 414
	statusUnsupportedMediaType  = 415
	statusTooManyRequests       = 429
	statusInternalServerError   = 500
	statusBadGateway            = 502

	methodGet  = "GET"
	methodPost = "POST"
)
