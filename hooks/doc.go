// Package hooks is the Metacontroller wire contract: the JSON of sync and
// finalize requests and answers, and the HTTP handlers that carry them.
//
// The handlers only do transport: they bound the body, check the content
// type, decode, call a Syncer, and encode. Every error a client can cause
// is answered with a 4xx and a JSON body that names the problem, because
// only a 200 makes Metacontroller apply anything: an error answer can
// never delete a child.
//
// It imports api/v1beta2 and the planners whose answers it carries, never a
// client of etcd (test/layout holds it to that); its tests find the
// fixtures and the captured requests through internal/testenv.
package hooks
