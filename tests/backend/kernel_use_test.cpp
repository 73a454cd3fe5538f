// tests/backend/kernel_use_test.cpp — the list of tests that reach a GEMM whose kernels the
// environment chooses (ete/backend/cpu/kernel_use.h): run.sh reruns only those under the other
// CPUs' kernel choices, so a GEMM entry that stopped noting itself would silently drop its tests
// from that pass.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>

#include "ete/backend/cpu/dnnl_gemm.h"
#include "ete/backend/cpu/gemm_host.h"
#include "ete/backend/cpu/kernel_use.h"

namespace ete {
namespace {

namespace fs = std::filesystem;

// Points ETE_KERNEL_USE_LOG at a fresh directory and ETE_TEST_NAME at "Suite.Case/1" for one
// test, and puts both (and the process's note) back as they were.
class KernelUse : public ::testing::Test {
  protected:
    void SetUp() override {
        path_ = fs::temp_directory_path() / ("ete_kernel_use_" + std::to_string(::getpid()));
        fs::remove_all(path_);
        fs::create_directories(path_);
        save("ETE_KERNEL_USE_LOG", log_);
        save("ETE_TEST_NAME", name_);
        setenv("ETE_KERNEL_USE_LOG", path_.c_str(), 1);
        setenv("ETE_TEST_NAME", "Suite.Case/1", 1);
        cpu::reset_profiled_kernel_note();
    }
    void TearDown() override {
        restore("ETE_KERNEL_USE_LOG", log_);
        restore("ETE_TEST_NAME", name_);
        fs::remove_all(path_);
        cpu::reset_profiled_kernel_note();
    }
    // The names of the files in the directory, sorted, each followed by a newline.
    std::string logged() const {
        std::set<std::string> names;
        for (const auto& e : fs::directory_iterator(path_)) {
            EXPECT_EQ(fs::file_size(e.path()), 0u) << e.path();
            names.insert(e.path().filename().string());
        }
        std::string s;
        for (const std::string& n : names) s += n + "\n";
        return s;
    }

    fs::path path_;

  private:
    struct Saved {
        bool set = false;
        std::string value;
    };
    static void save(const char* var, Saved& s) {
        const char* v = std::getenv(var);
        s = {v != nullptr, v ? v : ""};
    }
    static void restore(const char* var, const Saved& s) {
        if (s.set)
            setenv(var, s.value.c_str(), 1);
        else
            unsetenv(var);
    }
    Saved log_, name_;
};

TEST_F(KernelUse, TheFirstNoteOfATestNamesAFileAfterIt) {
    cpu::note_profiled_kernel();
    cpu::note_profiled_kernel();
    EXPECT_EQ(logged(), "Suite.Case%2F1\n");  // '/' cannot be in a file name
    setenv("ETE_TEST_NAME", "Suite.Next%", 1);
    cpu::note_profiled_kernel();  // still the same test: no new file
    EXPECT_EQ(logged(), "Suite.Case%2F1\n");
    cpu::reset_profiled_kernel_note();  // the next test starts
    cpu::note_profiled_kernel();
    EXPECT_EQ(logged(), "Suite.Case%2F1\nSuite.Next%25\n");
}

TEST_F(KernelUse, AnF32GemmNotesItselfAndAskingTheEnginesDoesToo) {
    const float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8};
    float c[4] = {};
    cpu::gemm_host(CMat(a, DType::F32, 2, 2), false, CMat(b, DType::F32, 2, 2), false,
                   Mat(c, DType::F32, 2, 2), 1.0f, 0.0f);
    EXPECT_EQ(c[0], 19.0f);  // 1·5 + 2·7: small integers, exact in fp32 in any order
    EXPECT_EQ(logged(), "Suite.Case%2F1\n");
    if (!cpu::dnnl_available()) return;  // no oneDNN: no engine for a profile to choose
    setenv("ETE_TEST_NAME", "Suite.Native", 1);
    cpu::reset_profiled_kernel_note();
    (void)cpu::dnnl_native(DType::BF16);  // the 16-bit engine's choice depends on the profile
    EXPECT_EQ(logged(), "Suite.Case%2F1\nSuite.Native\n");
}

TEST_F(KernelUse, NothingIsWrittenWithoutTheLogVariable) {
    unsetenv("ETE_KERNEL_USE_LOG");
    cpu::note_profiled_kernel();
    EXPECT_EQ(logged(), "");
}

}  // namespace
}  // namespace ete
