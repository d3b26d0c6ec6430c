// Errors carry a machine-readable reason: status.FromError reads the
// grpc-status-details-bin trailer (a google.rpc.Status) and its ErrorInfo.
package clienttest

import (
	"io"
	"strconv"
	"strings"
	"testing"

	pb "gpucompute/v1"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The ErrorInfo of err, which must have `code`.
func errorInfo(t *testing.T, err error, code codes.Code) *errdetails.ErrorInfo {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != code {
		t.Fatalf("got %v, want %v", err, code)
	}
	for _, detail := range st.Details() {
		if info, ok := detail.(*errdetails.ErrorInfo); ok {
			if info.Domain != "gpucompute.dev" {
				t.Errorf("domain %q", info.Domain)
			}
			return info
		}
	}
	t.Fatalf("no ErrorInfo in %v", st.Details())
	return nil
}

// The error a result stream ends with.
func streamError(t *testing.T, stream chunkStream, err error) error {
	t.Helper()
	for err == nil {
		_, err = stream.Recv()
	}
	if err == io.EOF {
		t.Fatal("the call succeeded")
	}
	return err
}

func instanceId(t *testing.T) string {
	info, err := pb.NewServerClient(conn).GetInfo(ctx(t), &pb.GetInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return info.InstanceId
}

func TestMissingBufferIsBufferNotFound(t *testing.T) {
	id := instanceId(t) + strings.Repeat("0", 24)
	stream, err := pb.NewBuffersClient(conn).Download(ctx(t), &pb.DownloadRequest{BufferId: id})
	info := errorInfo(t, streamError(t, stream, err), codes.NotFound)
	if info.Reason != "BUFFER_NOT_FOUND" || info.Metadata["field"] != "buffer_id" {
		t.Fatalf("%v", info)
	}
}

func TestBufferOfAnotherReplicaNamesItsOwner(t *testing.T) {
	owner := "0badcafe"
	if instanceId(t) == owner {
		owner = "1badcafe"
	}
	_, err := pb.NewBuffersClient(conn).Delete(ctx(t),
		&pb.DeleteRequest{BufferId: owner + strings.Repeat("a", 24)})
	info := errorInfo(t, err, codes.FailedPrecondition)
	if info.Reason != "BUFFER_ON_OTHER_REPLICA" || info.Metadata["owner_instance"] != owner {
		t.Fatalf("%v", info)
	}
}

func TestOverQuotaUploadIsQuotaExceeded(t *testing.T) {
	upload, err := pb.NewBuffersClient(conn).Upload(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	values := quotaBytes/8 + 1024
	header := &pb.UploadHeader{Name: "big", Dtype: pb.DType_FLOAT64, Shape: []int64{int64(values)}}
	upload.Send(&pb.UploadRequest{Kind: &pb.UploadRequest_Header{Header: header}})
	upload.Send(&pb.UploadRequest{Kind: &pb.UploadRequest_Data{Data: make([]byte, 8*values)}})
	_, err = upload.CloseAndRecv()
	info := errorInfo(t, err, codes.ResourceExhausted)
	if info.Reason != "QUOTA_EXCEEDED" || info.Metadata["limit"] != strconv.Itoa(quotaBytes) {
		t.Fatalf("%v", info)
	}
}

func TestLargeOneMessageResultIsResultTooLarge(t *testing.T) {
	stream, err := pb.NewComputeClient(conn).Normalize(ctx(t), &pb.NormalizeRequest{
		Input:  inline(random(2048), 1, 2048),
		Output: &pb.OutputOptions{SingleMessage: true, ChunkBytes: 4096}})
	info := errorInfo(t, streamError(t, stream, err), codes.FailedPrecondition)
	if info.Reason != "RESULT_TOO_LARGE_FOR_ONE_MESSAGE" || info.Metadata["limit"] != "4096" {
		t.Fatalf("%v", info)
	}
}
