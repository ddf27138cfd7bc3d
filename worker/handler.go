package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/runledger-go/runledger"
)

// Job is what a handler gets: the payload decoded into T, and the job's
// record as claimed (LEASED, at the attempt this run is).
type Job[T any] struct {
	Payload T
	Record  runledger.Job
}

// Handler runs one attempt of a job. Its context carries the job's timeout
// (timeout_seconds) as deadline, and is canceled when the worker loses the
// lease or shuts down. It returns the job's output, stored as JSON
// (json.Marshal; a json.RawMessage is stored as it is; nil stores NULL),
// or an error that fails the attempt: retryable, unless wrapped by
// Terminal; due again after the job type's backoff, or after the delay
// RetryAfter gives. A panic fails the attempt as PANICKED (dead-lettered);
// a handler that returns after its deadline fails it as TIMEOUT
// (retryable). Progress and checkpoints are reported with SetProgress and
// SetCheckpoint on the context.
type Handler[T any] func(ctx context.Context, job Job[T]) (any, error)

// Terminal marks err as a failure no retry can fix: the job is
// dead-lettered whatever attempts remain. Terminal(nil) is nil.
func Terminal(err error) error {
	if err == nil {
		return nil
	}
	return &terminalError{err}
}

type terminalError struct{ err error }

func (e *terminalError) Error() string { return e.err.Error() }
func (e *terminalError) Unwrap() error { return e.err }

// RetryAfter marks err as retryable after d (instead of the default
// backoff); d is not negative. RetryAfter(d, nil) is nil.
func RetryAfter(d time.Duration, err error) error {
	if err == nil {
		return nil
	}
	return &retryAfterError{err: err, delay: max(d, 0)}
}

type retryAfterError struct {
	err   error
	delay time.Duration
}

func (e *retryAfterError) Error() string { return e.err.Error() }
func (e *retryAfterError) Unwrap() error { return e.err }

// ErrorCoder is implemented by handler errors that name their error code;
// the code is stored as the job's last_error_code and in the failure
// event. Without one the code is worker.handler_failed (a *runledger.Error
// gives its own Code). A code the database cannot store (a NUL byte,
// invalid UTF-8, over 255 bytes) fails the attempt terminally as
// worker.output_invalid instead.
type ErrorCoder interface {
	ErrorCode() string
}

// The error codes the worker records for failures it classifies itself.
const (
	CodeHandlerFailed = "worker.handler_failed"
	CodePanicked      = "worker.panicked"
	CodeTimeout       = "worker.timeout"
	// CodeShutdown is never recorded: an attempt the shutdown cancels is
	// handed back without spending it (OutcomeHandedBack), not failed.
	CodeShutdown       = "worker.shutdown"
	CodePayloadInvalid = "worker.payload_invalid"
	CodeOutputInvalid  = "worker.output_invalid"
)

// maxErrorMessage bounds the error message stored for a failure.
const maxErrorMessage = 4096

// maxErrorCode bounds the error code stored for a failure: the code is a
// key of an index, whose entries the server bounds. A longer code fails
// the attempt as CodeOutputInvalid.
const maxErrorCode = 255

// errorCode returns the code a handler's error names.
func errorCode(err error) string {
	var c ErrorCoder
	if errors.As(err, &c) && c.ErrorCode() != "" {
		return c.ErrorCode()
	}
	var re *runledger.Error
	if errors.As(err, &re) {
		return string(re.Code)
	}
	return CodeHandlerFailed
}

// handler is a registered Handler with its payload type erased.
type handler func(ctx context.Context, rec runledger.Job) (json.RawMessage, error)

// erase adapts h: it decodes the payload (a payload that does not decode
// into T is a terminal failure with CodePayloadInvalid) and encodes the
// output.
func erase[T any](h Handler[T]) handler {
	return func(ctx context.Context, rec runledger.Job) (json.RawMessage, error) {
		var p T
		if len(rec.Payload) > 0 {
			if err := json.Unmarshal(rec.Payload, &p); err != nil {
				return nil, Terminal(codedError{CodePayloadInvalid, fmt.Errorf("decode the payload: %w", err)})
			}
		}
		out, err := h(ctx, Job[T]{Payload: p, Record: rec})
		if err != nil {
			return nil, err
		}
		switch v := out.(type) {
		case nil:
			return nil, nil
		case json.RawMessage:
			if !json.Valid(v) {
				return nil, Terminal(codedError{CodeOutputInvalid, errors.New("the output is not valid JSON")})
			}
			return v, nil
		}
		b, err := json.Marshal(out)
		if err != nil {
			return nil, Terminal(codedError{CodeOutputInvalid, fmt.Errorf("encode the output: %w", err)})
		}
		return b, nil
	}
}

// codedError is an error with the code the worker records for it.
type codedError struct {
	code string
	err  error
}

func (e codedError) Error() string     { return e.err.Error() }
func (e codedError) Unwrap() error     { return e.err }
func (e codedError) ErrorCode() string { return e.code }
