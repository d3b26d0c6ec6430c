// Any gRPC client can call the service: Go's grpc (Debian's golang-google-grpc-dev)
// with stubs that protoc-gen-go makes from proto/ calls health, lists the services
// through server reflection, runs each of the four operations and a buffer round
// trip, and checks results against float64 references computed here.
//   tests/go/run.sh build/server/gpucompute-server
package clienttest

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"math"
	"math/rand"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"testing"
	"time"

	pb "gpucompute/v1"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	health "google.golang.org/grpc/health/grpc_health_v1"
	reflection "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/grpc/status"
)

var conn *grpc.ClientConn

// The server's buffer quota (error_reasons_test.go uploads more).
const quotaBytes = 1 << 20

// Starts the server on a port of the kernel's choosing, read from its log.
func TestMain(m *testing.M) {
	server := exec.Command(os.Getenv("GPUCOMPUTE_SERVER"), "--address=127.0.0.1:0",
		"--metrics_address=", "--backend=cpu", "--buffer_quota_bytes="+strconv.Itoa(quotaBytes))
	logs, err := server.StderrPipe()
	if err == nil {
		err = server.Start()
	}
	if err != nil {
		panic("set GPUCOMPUTE_SERVER to the gpucompute-server binary: " + err.Error())
	}
	serving := regexp.MustCompile(`serving gRPC on \S+ \(port (\d+)\)`)
	lines := bufio.NewScanner(logs)
	port := ""
	for port == "" && lines.Scan() {
		if match := serving.FindStringSubmatch(lines.Text()); match != nil {
			port = match[1]
		}
	}
	go io.Copy(io.Discard, logs)
	if port != "" {
		conn, err = grpc.Dial("127.0.0.1:"+port, grpc.WithInsecure(), grpc.WithBlock(),
			grpc.WithTimeout(10*time.Second))
	}
	code := 1
	if port != "" && err == nil {
		code = m.Run()
	}
	server.Process.Kill()
	os.Exit(code)
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func float64Tensor(values []float64, shape ...int64) *pb.Tensor {
	data := make([]byte, 8*len(values))
	for i, v := range values {
		binary.LittleEndian.PutUint64(data[8*i:], math.Float64bits(v))
	}
	return &pb.Tensor{Dtype: pb.DType_FLOAT64, Shape: shape, Data: data}
}

func inline(values []float64, shape ...int64) *pb.Operand {
	return &pb.Operand{Source: &pb.Operand_Tensor{Tensor: float64Tensor(values, shape...)}}
}

func random(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = rand.Float64() + 0.1
	}
	return out
}

type chunkStream interface {
	Recv() (*pb.ResultChunk, error)
}

// A result stream reassembled: header, data chunks at their offsets, trailer.
func readResult(t *testing.T, stream chunkStream, err error) ([]int64, []float64) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	var header *pb.ResultHeader
	var data []byte
	trailers := 0
	for {
		chunk, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch kind := chunk.Kind.(type) {
		case *pb.ResultChunk_Header:
			header = kind.Header
		case *pb.ResultChunk_Data:
			if kind.Data.Offset != uint64(len(data)) {
				t.Fatalf("chunk at offset %d after %d bytes", kind.Data.Offset, len(data))
			}
			data = append(data, kind.Data.Data...)
		case *pb.ResultChunk_Trailer:
			trailers++
		}
	}
	if header == nil || trailers != 1 || uint64(len(data)) != header.TotalBytes {
		t.Fatalf("broken stream: header %v, %d trailers, %d bytes", header, trailers, len(data))
	}
	values := make([]float64, len(data)/8)
	for i := range values {
		values[i] = math.Float64frombits(binary.LittleEndian.Uint64(data[8*i:]))
	}
	return header.Shape, values
}

func expectClose(t *testing.T, got, want []float64, rtol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d values, want %d", len(got), len(want))
	}
	for i := range want {
		if math.Abs(got[i]-want[i]) > rtol*math.Abs(want[i]) {
			t.Errorf("element %d: %v, want %v", i, got[i], want[i])
		}
	}
}

func TestHealthIsServing(t *testing.T) {
	reply, err := health.NewHealthClient(conn).Check(ctx(t), &health.HealthCheckRequest{})
	if err != nil || reply.Status != health.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", reply, err)
	}
}

func TestReflectionListsEveryService(t *testing.T) {
	stream, err := reflection.NewServerReflectionClient(conn).ServerReflectionInfo(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	request := &reflection.ServerReflectionRequest{
		MessageRequest: &reflection.ServerReflectionRequest_ListServices{ListServices: ""}}
	if err := stream.Send(request); err != nil {
		t.Fatal(err)
	}
	reply, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, service := range reply.GetListServicesResponse().GetService() {
		names = append(names, service.Name)
	}
	sort.Strings(names)
	want := []string{"gpucompute.v1.Buffers", "gpucompute.v1.Compute", "gpucompute.v1.Server",
		"gpucompute.v1.SharedMemory",
		"grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection",
		"grpc.reflection.v1alpha.ServerReflection"}
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("services %v, want %v", names, want)
	}
}

func TestServerInfoHasAnInstanceId(t *testing.T) {
	info, err := pb.NewServerClient(conn).GetInfo(ctx(t), &pb.GetInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[0-9a-f]{8}$`).MatchString(info.InstanceId) || len(info.Operations) != 5 {
		t.Fatalf("info: %v", info)
	}
}

func TestDiscountProductIsExact(t *testing.T) {
	factors, values := random(2*3), random(4*2*3)
	stream, err := pb.NewComputeClient(conn).DiscountProduct(ctx(t), &pb.DiscountProductRequest{
		Factors: inline(factors, 2, 3), Values: inline(values, 4, 2, 3)})
	shape, got := readResult(t, stream, err)
	want := make([]float64, len(values))
	for i, v := range values {
		want[i] = factors[i%6] * v
	}
	if !reflect.DeepEqual(shape, []int64{4, 2, 3}) || !reflect.DeepEqual(got, want) {
		t.Fatalf("shape %v values %v, want %v", shape, got, want)
	}
}

func TestHaversineMeshMatchesTheFormula(t *testing.T) {
	stream, err := pb.NewComputeClient(conn).HaversineGrid(ctx(t), &pb.HaversineGridRequest{
		Grid: &pb.HaversineGridRequest_Mesh{Mesh: &pb.LatLonMesh{LatStart: 29, LatStop: 31,
			NLat: 3, LonStart: 99, LonStop: 101, NLon: 4, Dtype: pb.DType_FLOAT64}},
		References: []*pb.GeoPoint{{Lat: 30, Lon: 101}}})
	_, got := readResult(t, stream, err)
	const radius, rad = 6371.0088, math.Pi / 180
	var want []float64
	for i := 0; i < 3; i++ {
		for j := 0; j < 4; j++ {
			lat, lon := 29+float64(i), 99+2*float64(j)/3
			h := math.Pow(math.Sin((lat-30)*rad/2), 2) +
				math.Cos(lat*rad)*math.Cos(30*rad)*math.Pow(math.Sin((lon-101)*rad/2), 2)
			want = append(want, 2*radius*math.Atan2(math.Sqrt(h), math.Sqrt(1-h)))
		}
	}
	expectClose(t, got, want, 1e-12)
}

func TestNormalizeDividesRowsByTheirSum(t *testing.T) {
	a := random(2 * 5)
	stream, err := pb.NewComputeClient(conn).Normalize(ctx(t),
		&pb.NormalizeRequest{Input: inline(a, 2, 5)})
	_, got := readResult(t, stream, err)
	want := make([]float64, len(a))
	for r := 0; r < 2; r++ {
		sum := 0.0
		for _, v := range a[5*r : 5*r+5] {
			sum += v
		}
		for c := 0; c < 5; c++ {
			want[5*r+c] = a[5*r+c] / sum
		}
	}
	expectClose(t, got, want, 1e-14)
}

func TestLombScargleMatchesTheClassicPeriodogram(t *testing.T) {
	x, y := make([]float64, 64), make([]float64, 64)
	for i := range x {
		x[i] = float64(i)*0.37 + 0.05*math.Sin(float64(i))
		y[i] = math.Sin(1.3 * x[i])
	}
	freqs := []float64{0.5, 1.0, 1.3, 2.0}
	stream, err := pb.NewComputeClient(conn).LombScargle(ctx(t), &pb.LombScargleRequest{
		X: inline(x, 64), Y: inline(y, 64),
		Frequencies: &pb.LombScargleRequest_Freqs{Freqs: inline(freqs, 4)}})
	_, got := readResult(t, stream, err)
	want := make([]float64, len(freqs))
	for f, w := range freqs {
		var s2, c2 float64
		for _, t := range x {
			s2 += math.Sin(2 * w * t)
			c2 += math.Cos(2 * w * t)
		}
		tau := math.Atan2(s2, c2) / (2 * w)
		var yc, ys, cc, ss float64
		for k, t := range x {
			c, s := math.Cos(w*(t-tau)), math.Sin(w*(t-tau))
			yc, ys, cc, ss = yc+y[k]*c, ys+y[k]*s, cc+c*c, ss+s*s
		}
		want[f] = 0.5 * (yc*yc/cc + ys*ys/ss)
	}
	expectClose(t, got, want, 1e-9)
}

func TestBufferRoundTrip(t *testing.T) {
	a := random(3 * 4)
	buffers := pb.NewBuffersClient(conn)
	upload, err := buffers.Upload(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	data := float64Tensor(a, 3, 4).Data
	for _, message := range []*pb.UploadRequest{
		{Kind: &pb.UploadRequest_Header{Header: &pb.UploadHeader{Name: "go", Dtype: pb.DType_FLOAT64, Shape: []int64{3, 4}}}},
		{Kind: &pb.UploadRequest_Data{Data: data[:40]}},
		{Kind: &pb.UploadRequest_Data{Data: data[40:]}},
	} {
		if err := upload.Send(message); err != nil {
			t.Fatal(err)
		}
	}
	info, err := upload.CloseAndRecv()
	if err != nil {
		t.Fatal(err)
	}
	stream, err := buffers.Download(ctx(t), &pb.DownloadRequest{BufferId: info.Id})
	if _, back := readResult(t, stream, err); !reflect.DeepEqual(back, a) {
		t.Fatalf("downloaded %v, uploaded %v", back, a)
	}
	normalized, err := pb.NewComputeClient(conn).Normalize(ctx(t), &pb.NormalizeRequest{
		Input: &pb.Operand{Source: &pb.Operand_BufferId{BufferId: info.Id}}, Norm: pb.Norm_NORM_L2})
	_, got := readResult(t, normalized, err)
	want := make([]float64, len(a))
	for r := 0; r < 3; r++ {
		norm := math.Sqrt(a[4*r]*a[4*r] + a[4*r+1]*a[4*r+1] + a[4*r+2]*a[4*r+2] + a[4*r+3]*a[4*r+3])
		for c := 0; c < 4; c++ {
			want[4*r+c] = a[4*r+c] / norm
		}
	}
	expectClose(t, got, want, 1e-14)
	freed, err := buffers.Delete(ctx(t), &pb.DeleteRequest{BufferId: info.Id})
	if err != nil || freed.FreedBytes != 96 {
		t.Fatalf("delete: %v %v", freed, err)
	}
	if _, err := buffers.Delete(ctx(t), &pb.DeleteRequest{BufferId: info.Id}); status.Code(err) != codes.NotFound {
		t.Fatalf("second delete: %v, want NOT_FOUND", err)
	}
}
