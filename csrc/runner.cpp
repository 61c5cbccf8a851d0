// A Python-free program: loads a TorchScript model that calls the op, runs it on a fixed input and
// checks the result against torch's own softmax. Linked with --no-as-needed to the op library, so
// the op is registered before torch::jit::load resolves it.
#include <torch/script.h>

#include <cstdlib>
#include <iostream>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: " << argv[0] << " MODEL.pt SCALE\n";
    return 2;
  }
  const double scale = std::atof(argv[2]);
  torch::jit::script::Module module = torch::jit::load(argv[1]);
  auto x = torch::linspace(-3.0, 3.0, 24, torch::kFloat64).reshape({4, 6});
  auto y = module.forward({x}).toTensor();
  auto expected = torch::softmax(x * scale, -1);
  const double err = (y - expected).abs().max().item<double>();
  std::cout << "max_abs_err " << err << "\n" << y << "\n";
  return err < 1e-12 ? 0 : 1;
}
