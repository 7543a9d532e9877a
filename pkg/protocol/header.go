package protocol

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Frame header layout (big-endian), HeaderSize = 18 bytes:
//
//	0       2       3       4       6                       14              18
//	+-------+-------+-------+-------+-----------------------+---------------+
//	| magic |version| flags | code  |      request id       |  body length  |
//	|  u16  |  u8   |  u8   |  u16  |          u64          |      u32      |
//	+-------+-------+-------+-------+-----------------------+---------------+
//	followed by body length bytes of body.
//
// magic is 0x514D ("QM"). code is a Command in requests and a Status in
// responses. The request id is chosen by the client and echoed in the
// response; a connection may carry any number of requests in flight.
const (
	// HeaderSize is the size in bytes of every frame header.
	HeaderSize = 18
	// Magic opens every frame.
	Magic uint16 = 0x514D
	// Version is the protocol version this package speaks.
	Version uint8 = 1
	// DefaultMaxFrameSize bounds a frame's body unless a server or client
	// configures another limit: 16 MiB, room for a full batch of messages.
	DefaultMaxFrameSize = 16 << 20
)

// Flags describe a frame's direction and whether it expects a reply.
type Flags uint8

const (
	// FlagResponse marks a response; its code is a Status.
	FlagResponse Flags = 1 << 0
	// FlagOneWay marks a request that expects no response.
	FlagOneWay Flags = 1 << 1

	knownFlags = FlagResponse | FlagOneWay
)

// Header is the fixed part of every frame.
type Header struct {
	Version   uint8
	Flags     Flags
	Code      uint16
	RequestID uint64
	BodyLen   uint32
}

// IsResponse reports whether h heads a response frame.
func (h Header) IsResponse() bool { return h.Flags&FlagResponse != 0 }

// IsOneWay reports whether h heads a request that expects no reply.
func (h Header) IsOneWay() bool { return h.Flags&FlagOneWay != 0 }

// Command returns the header's code as a command (requests).
func (h Header) Command() Command { return Command(h.Code) }

// Status returns the header's code as a status (responses).
func (h Header) Status() Status { return Status(h.Code) }

// ParseHeader decodes a frame header from the first HeaderSize bytes of b
// and checks magic, version, flags and the body length against maxBody
// (maxBody <= 0 means DefaultMaxFrameSize). It returns ErrShortHeader when
// b holds fewer than HeaderSize bytes; every other error means the stream is
// unusable and the connection should be closed.
func ParseHeader(b []byte, maxBody int) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, ErrShortHeader
	}
	if m := binary.BigEndian.Uint16(b[0:2]); m != Magic {
		return Header{}, fmt.Errorf("%w: 0x%04x", ErrBadMagic, m)
	}
	h := Header{
		Version:   b[2],
		Flags:     Flags(b[3]),
		Code:      binary.BigEndian.Uint16(b[4:6]),
		RequestID: binary.BigEndian.Uint64(b[6:14]),
		BodyLen:   binary.BigEndian.Uint32(b[14:18]),
	}
	if h.Version != Version {
		return Header{}, fmt.Errorf("%w: %d", ErrUnknownVersion, h.Version)
	}
	if h.Flags&^knownFlags != 0 {
		return Header{}, fmt.Errorf("%w: 0x%02x", ErrBadFlags, uint8(h.Flags))
	}
	if maxBody <= 0 {
		maxBody = DefaultMaxFrameSize
	}
	if int64(h.BodyLen) > int64(maxBody) {
		return Header{}, fmt.Errorf("%w: %d > %d", ErrFrameTooLarge, h.BodyLen, maxBody)
	}
	return h, nil
}

// AppendHeader appends the encoding of h to dst.
func AppendHeader(dst []byte, h Header) []byte {
	dst = binary.BigEndian.AppendUint16(dst, Magic)
	dst = append(dst, h.Version, uint8(h.Flags))
	dst = binary.BigEndian.AppendUint16(dst, h.Code)
	dst = binary.BigEndian.AppendUint64(dst, h.RequestID)
	return binary.BigEndian.AppendUint32(dst, h.BodyLen)
}

// AppendRequest appends a whole request frame (header and body) to dst.
func AppendRequest(dst []byte, cmd Command, requestID uint64, body []byte) []byte {
	dst = AppendHeader(dst, Header{Version: Version, Code: uint16(cmd), RequestID: requestID, BodyLen: uint32(len(body))})
	return append(dst, body...)
}

// AppendResponse appends a whole response frame (header and body) to dst.
func AppendResponse(dst []byte, status Status, requestID uint64, body []byte) []byte {
	dst = AppendHeader(dst, Header{Version: Version, Flags: FlagResponse, Code: uint16(status), RequestID: requestID, BodyLen: uint32(len(body))})
	return append(dst, body...)
}

// AppendErrorResponse appends a response frame whose body is the error's
// message for people. A *Error keeps its status and sends its Message (the
// receiver rebuilds the "qmq: <status>" prefix); any other error is
// StatusInternal with its whole text.
func AppendErrorResponse(dst []byte, requestID uint64, err error) []byte {
	st, msg := StatusOf(err), ""
	var pe *Error
	switch {
	case errors.As(err, &pe) && pe.Error() == err.Error():
		msg = pe.Message
	case err != nil:
		msg = err.Error()
	}
	return AppendResponse(dst, st, requestID, []byte(msg))
}

// Frame is a decoded frame whose body is owned by the caller.
type Frame struct {
	Header Header
	Body   []byte
}

// ReadFrame splits one whole frame from the front of b. It returns the frame
// (whose Body aliases b), the number of bytes consumed, and ErrShortHeader or
// ErrShortFrame when b does not yet hold a whole frame.
func ReadFrame(b []byte, maxBody int) (Frame, int, error) {
	h, err := ParseHeader(b, maxBody)
	if err != nil {
		return Frame{}, 0, err
	}
	n := HeaderSize + int(h.BodyLen)
	if len(b) < n {
		return Frame{}, 0, ErrShortFrame
	}
	return Frame{Header: h, Body: b[HeaderSize:n:n]}, n, nil
}
