#include "server/reflection.h"

#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace gpucompute {
namespace {

using google::protobuf::DescriptorPool;
using google::protobuf::FileDescriptor;

// `file` and every file it imports, transitively, each once: a client needs all
// of them to build the descriptors.
std::vector<std::string> SerializedWithDependencies(const FileDescriptor& file) {
  std::vector<std::string> serialized;
  absl::flat_hash_set<const FileDescriptor*> seen = {&file};
  std::vector<const FileDescriptor*> pending = {&file};
  while (!pending.empty()) {
    const FileDescriptor* next = pending.back();
    pending.pop_back();
    google::protobuf::FileDescriptorProto proto;
    next->CopyTo(&proto);
    serialized.push_back(proto.SerializeAsString());
    for (int i = 0; i < next->dependency_count(); ++i) {
      if (seen.insert(next->dependency(i)).second) pending.push_back(next->dependency(i));
    }
  }
  return serialized;
}

// Fills `response` for one request; the messages' wording is gRPC's own plugin's.
template <typename Request, typename Response>
void Answer(const Request& request, const std::vector<std::string>& services,
            Response& response) {
  response.set_valid_host(request.host());
  *response.mutable_original_request() = request;
  const DescriptorPool& pool = *DescriptorPool::generated_pool();
  auto error = [&response](grpc::StatusCode code, const char* message) {
    response.mutable_error_response()->set_error_code(code);
    response.mutable_error_response()->set_error_message(message);
  };
  const FileDescriptor* file = nullptr;
  switch (request.message_request_case()) {
    case Request::kListServices:
      for (const std::string& name : services) {
        response.mutable_list_services_response()->add_service()->set_name(name);
      }
      return;
    case Request::kFileByFilename:
      file = pool.FindFileByName(request.file_by_filename());
      if (file == nullptr) return error(grpc::NOT_FOUND, "File not found.");
      break;
    case Request::kFileContainingSymbol:
      file = pool.FindFileContainingSymbol(request.file_containing_symbol());
      if (file == nullptr) return error(grpc::NOT_FOUND, "Symbol not found.");
      break;
    case Request::kFileContainingExtension: {
      const auto& wanted = request.file_containing_extension();
      const auto* type = pool.FindMessageTypeByName(wanted.containing_type());
      if (type == nullptr) return error(grpc::NOT_FOUND, "Type not found.");
      const auto* extension = pool.FindExtensionByNumber(type, wanted.extension_number());
      if (extension == nullptr) return error(grpc::NOT_FOUND, "Extension not found.");
      file = extension->file();
      break;
    }
    case Request::kAllExtensionNumbersOfType: {
      const auto* type = pool.FindMessageTypeByName(request.all_extension_numbers_of_type());
      if (type == nullptr) return error(grpc::NOT_FOUND, "Type not found.");
      std::vector<const google::protobuf::FieldDescriptor*> extensions;
      pool.FindAllExtensions(type, &extensions);
      auto* numbers = response.mutable_all_extension_numbers_response();
      numbers->set_base_type_name(type->full_name());
      for (const auto* extension : extensions) numbers->add_extension_number(extension->number());
      return;
    }
    default:
      return error(grpc::UNIMPLEMENTED, "The request is not implemented.");
  }
  for (std::string& serialized : SerializedWithDependencies(*file)) {
    response.mutable_file_descriptor_response()->add_file_descriptor_proto(std::move(serialized));
  }
}

// Answers each request of the stream in turn until the client closes it.
template <typename Request, typename Response>
class ReflectionReactor final : public grpc::ServerBidiReactor<Request, Response> {
 public:
  explicit ReflectionReactor(const std::vector<std::string>& services) : services_(services) {
    this->StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) return this->Finish(grpc::Status::OK);
    response_.Clear();
    Answer(request_, services_, response_);
    this->StartWrite(&response_);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) return this->Finish(grpc::Status(grpc::CANCELLED, "reflection stream broken"));
    this->StartRead(&request_);
  }

  void OnDone() override { delete this; }

 private:
  const std::vector<std::string>& services_;
  Request request_;
  Response response_;
};

}  // namespace

template <typename Service, typename Request, typename Response>
grpc::ServerBidiReactor<Request, Response>*
ReflectionService<Service, Request, Response>::ServerReflectionInfo(
    grpc::CallbackServerContext*) {
  return new ReflectionReactor<Request, Response>(services_);
}

template class ReflectionService<grpc::reflection::v1::ServerReflection,
                                 grpc::reflection::v1::ServerReflectionRequest,
                                 grpc::reflection::v1::ServerReflectionResponse>;
template class ReflectionService<grpc::reflection::v1alpha::ServerReflection,
                                 grpc::reflection::v1alpha::ServerReflectionRequest,
                                 grpc::reflection::v1alpha::ServerReflectionResponse>;

absl::StatusOr<std::vector<std::string>> ReflectedServices(std::vector<std::string> served) {
  // gRPC's built-in health service does not use the generated health messages;
  // naming one of them links health.proto into the pool.
  const google::protobuf::FileDescriptor* health =
      grpc::health::v1::HealthCheckRequest::descriptor()->file();
  served.push_back(health->service(0)->full_name());
  served.push_back(grpc::reflection::v1::ServerReflection::service_full_name());
  served.push_back(grpc::reflection::v1alpha::ServerReflection::service_full_name());
  for (const std::string& name : served) {
    if (DescriptorPool::generated_pool()->FindServiceByName(name) == nullptr) {
      return absl::InternalError(
          absl::StrCat("reflection: service ", name, " has no descriptor in the generated pool"));
    }
  }
  return served;
}

}  // namespace gpucompute
