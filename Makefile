# Makefile: builds dplhost (C host + embedded LuaJIT), the CUDA plugin
# dpl_cuda.so (when nvcc is found), runs the demo, the tests and the
# benchmarks. `make SAN=1` builds with ASan+UBSan; NO_CUDA=1 / NO_MPI=1 switch
# the optional parts off.

CC      ?= gcc
PREFIX  ?= /usr/local
VERSION := 0.1.0

ifeq ($(SAN),1)
VARIANT := san
OPT     := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
else
VARIANT := rel
OPT     := -O2 -g
endif

BUILD   := build/$(VARIANT)
LUAJIT_CFLAGS := $(shell pkg-config --cflags luajit 2>/dev/null || echo -I/usr/include/luajit-2.1)
LUAJIT_LIBDIR := $(shell pkg-config --variable=libdir luajit 2>/dev/null)
LUAJIT_A      := $(wildcard $(LUAJIT_LIBDIR)/libluajit-5.1.a)
ifneq ($(LUAJIT_A),)
LUAJIT_LIBS   := $(LUAJIT_A)
LUAJIT_KIND   := static
else
LUAJIT_LIBS   := $(shell pkg-config --libs luajit 2>/dev/null || echo -lluajit-5.1)
LUAJIT_KIND   := shared
endif

CFLAGS  := -std=c11 $(OPT) -MMD -MP -Wall -Wextra -pthread -Iinclude -Isrc/host \
           $(LUAJIT_CFLAGS) -DDPL_VERSION_STRING='"$(VERSION)"' $(EXTRA_CFLAGS)
LDFLAGS := $(OPT) -rdynamic -pthread $(EXTRA_LDFLAGS)
LDLIBS  := $(LUAJIT_LIBS) -lz -ldl -lm

SRCS := $(wildcard src/host/*.c) $(wildcard src/device/*.c) $(wildcard src/comm/*.c) $(wildcard src/tensor/*.c) $(wildcard src/data/*.c)
OBJS := $(patsubst src/%.c,$(BUILD)/%.o,$(SRCS)) $(BUILD)/dpl_header_text.o

# optional parts: detected, reported, never required
HAVE_NVCC := $(if $(NO_CUDA),,$(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null))
HAVE_MPI  := $(if $(NO_MPI),,$(shell command -v mpicc 2>/dev/null))

# The CUDA plugin (src/cuda/): host side in C (gcc), kernels in CUDA C++ (nvcc),
# linked by nvcc (cudart static) against cuBLAS; sm_90 machine code plus
# compute_90 PTX. It is loaded with dlopen; the core binary never links CUDA.
CUDA_HOME   := $(if $(HAVE_NVCC),$(patsubst %/bin/nvcc,%,$(realpath $(HAVE_NVCC))))
CUDA_LIBDIR := $(firstword $(wildcard $(CUDA_HOME)/lib64 $(CUDA_HOME)/lib))
CUDA_ARCH   ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
NVCC_FLAGS  := -O3 -std=c++17 $(CUDA_ARCH) -Xcompiler -fPIC,-Wall,-Wextra -Iinclude -Isrc/host $(EXTRA_NVCCFLAGS)
PLUGIN_CFLAGS := -std=c11 -O2 -g -MMD -MP -Wall -Wextra -pthread -fPIC -Iinclude -Isrc/host -I$(CUDA_HOME)/include $(EXTRA_CFLAGS)
CUDA_C_SRCS  := $(wildcard src/cuda/*.c)
CUDA_CU_SRCS := $(wildcard src/cuda/*.cu)
CUDA_OBJS    := $(patsubst src/%.c,$(BUILD)/%.o,$(CUDA_C_SRCS)) $(patsubst src/%.cu,$(BUILD)/%.cu.o,$(CUDA_CU_SRCS))
PLUGIN       := $(if $(HAVE_NVCC),dpl_cuda.so)

.PHONY: all deps demo test bench install clean report cuda-emu FORCE
all: dplhost $(PLUGIN) report

report:
	@echo "dplhost $(VERSION) [$(VARIANT)] build:"
	@echo "  ✓ LuaJIT ($(LUAJIT_KIND))"
	@if [ -n "$(HAVE_MPI)" ]; then echo "  ✓ Open MPI found ($(HAVE_MPI)): the mpi backend of dpl.dist loads libmpi at run time"; \
	 else echo "  ✗ Open MPI $(if $(NO_MPI),(NO_MPI=1),(mpicc not found))"; fi
	@if [ -n "$(HAVE_NVCC)" ]; then echo "  ✓ CUDA toolkit found ($(HAVE_NVCC)): built the CUDA plugin ./dpl_cuda.so (sm_90 + PTX)"; \
	 else echo "  ✗ CUDA $(if $(NO_CUDA),(NO_CUDA=1),(nvcc not found))"; fi

# copy then rename: a running ./dplhost (the test runner) is never overwritten in place
dplhost: $(BUILD)/dplhost FORCE
	@cmp -s $< $@ || { cp $< $@.tmp && mv -f $@.tmp $@; }

# relinked when the static LuaJIT changes (scripts/install-deps.sh swaps packages, whose
# files keep their old mtimes): the library's size and mtime are kept in a stamp
LUAJIT_ID := $(if $(LUAJIT_A),$(shell stat -L -c '%s %Y' $(LUAJIT_A) 2>/dev/null),shared)
$(BUILD)/luajit.id: FORCE
	@mkdir -p $(dir $@)
	@echo '$(LUAJIT_ID)' | cmp -s - $@ || echo '$(LUAJIT_ID)' > $@

$(BUILD)/dplhost: $(OBJS) $(BUILD)/luajit.id
	$(CC) $(LDFLAGS) -o $@ $(OBJS) $(LDLIBS)

# the plugin beside the binary, where dplhost looks for it
dpl_cuda.so: $(BUILD)/dpl_cuda.so FORCE
	@cmp -s $< $@ || { cp $< $@.tmp && mv -f $@.tmp $@; }

$(BUILD)/dpl_cuda.so: $(CUDA_OBJS)
	$(HAVE_NVCC) -shared $(CUDA_ARCH) -o $@ $^ -L$(CUDA_LIBDIR) -lcublas -Xlinker -rpath=$(CUDA_LIBDIR)

$(BUILD)/cuda/%.o: src/cuda/%.c include/dpl.h src/host/dpl_internal.h src/tensor/dpl_tensor_internal.h src/tensor/dpl_tensor_backend.h
	@mkdir -p $(dir $@)
	$(CC) $(PLUGIN_CFLAGS) -c -o $@ $<

$(BUILD)/cuda/%.cu.o: src/cuda/%.cu $(wildcard src/cuda/*.h src/cuda/*.cuh) src/tensor/dpl_special_math.h include/dpl.h
	@mkdir -p $(dir $@)
	$(HAVE_NVCC) $(NVCC_FLAGS) -c -o $@ $<

$(BUILD)/%.o: src/%.c include/dpl.h src/host/dpl_internal.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

# tensor kernels: -O3 for the vectorizer, no errno from libm so sqrt & co vectorize
TENSOR_CFLAGS := $(if $(filter san,$(VARIANT)),,-O3) -fno-math-errno
$(BUILD)/tensor/%.o: src/tensor/%.c include/dpl.h src/host/dpl_internal.h src/tensor/dpl_tensor_internal.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(TENSOR_CFLAGS) -c -o $@ $<

# the vector math kernels rely on IEEE operations not being fused (the same bits on every path)
$(BUILD)/tensor/dpl_tensor_vmath.o: TENSOR_CFLAGS += -ffp-contract=off

# the collectives' reduction loops and the batch assembly: the same flags (at -O2
# they stay scalar)
$(BUILD)/comm/dpl_comm_kernels.o $(BUILD)/data/dpl_idx.o: $(BUILD)/%.o: src/%.c include/dpl.h src/host/dpl_internal.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(TENSOR_CFLAGS) -c -o $@ $<

# include/dpl.h, minus preprocessor lines, as a C string for ffi.cdef
$(BUILD)/dpl_header_text.c: include/dpl.h
	@mkdir -p $(dir $@)
	awk 'BEGIN { print "const char dpl_header_text[] =" } /^[ \t]*#/ { next } \
	  { gsub(/\\/, "\\\\"); gsub(/"/, "\\\""); print "  \"" $$0 "\\n\"" } END { print ";" }' $< > $@

$(BUILD)/dpl_header_text.o: $(BUILD)/dpl_header_text.c
	$(CC) $(CFLAGS) -c -o $@ $<

# The CUDA emulator (scripts/cuda-emu/, docs/cuda.md): the whole plugin built
# for the host with g++ only, no nvcc: src/cuda/*.c against fake CUDA headers,
# the .cu files rewritten (emu_rewrite.pl: launches become emu_launch) and
# compiled as C++, plus a host CUDA runtime, cuBLAS, cuSOLVER (dense) and NCCL (a rank per process), in one
# build/cuda-emu/dpl_cuda_emu.so; and a fake NVML, build/cuda-emu/libnvidia-ml.so.1.
# Not part of `all`. Run: scripts/cuda-emu/run-ops.sh.
EMU       := build/cuda-emu
EMU_DIR   := scripts/cuda-emu
EMU_INC   := $(EMU_DIR)/include
EMU_HDRS  := $(wildcard $(EMU_INC)/*.h) $(EMU_DIR)/emu_internal.h
EMU_CFLAGS   := -std=c11 -O2 -g -MMD -MP -Wall -Wextra -pthread -fPIC -Iinclude -Isrc/host -I$(EMU_INC) $(EXTRA_CFLAGS)
EMU_CXXFLAGS := -std=c++17 -O2 -g -MMD -MP -Wall -Wextra -Wno-unknown-pragmas -pthread -fPIC -ffp-contract=off \
                -Iinclude -Isrc/host -Isrc/cuda -I$(EMU_INC)
EMU_RT_OBJS := $(EMU)/emu_runtime.o $(EMU)/emu_cublas.o $(EMU)/emu_cusolver.o $(EMU)/emu_nccl.o $(EMU)/emu_order.o
EMU_OBJS  := $(patsubst src/cuda/%.c,$(EMU)/cuda/%.o,$(CUDA_C_SRCS)) \
             $(patsubst src/cuda/%.cu,$(EMU)/gen/%.o,$(CUDA_CU_SRCS)) $(EMU_RT_OBJS)

cuda-emu: $(EMU)/dpl_cuda_emu.so $(EMU)/libnvidia-ml.so.1 $(EMU)/emu_selftest

.PRECIOUS: $(EMU)/gen/%.cpp

$(EMU)/dpl_cuda_emu.so: $(EMU_OBJS)
	g++ -shared -pthread -o $@ $^ -ldl -lm

# the emulator's own checks (spec/cuda_emu_spec.lua runs it)
$(EMU)/emu_selftest: $(EMU)/gen/emu_selftest.o $(EMU_RT_OBJS)
	g++ -pthread -o $@ $^ -ldl -lm

$(EMU)/gen/emu_selftest.cpp: $(EMU_DIR)/emu_selftest.cu $(EMU_DIR)/emu_rewrite.pl
	@mkdir -p $(dir $@)
	perl $(EMU_DIR)/emu_rewrite.pl $< > $@.tmp && mv -f $@.tmp $@

$(EMU)/libnvidia-ml.so.1: $(EMU_DIR)/emu_nvml.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -O2 -Wall -Wextra -fPIC -shared -o $@ $<

$(EMU)/cuda/%.o: src/cuda/%.c $(EMU_HDRS) include/dpl.h src/host/dpl_internal.h src/tensor/dpl_tensor_internal.h src/tensor/dpl_tensor_backend.h
	@mkdir -p $(dir $@)
	$(CC) $(EMU_CFLAGS) -c -o $@ $<

$(EMU)/gen/%.cpp: src/cuda/%.cu $(EMU_DIR)/emu_rewrite.pl
	@mkdir -p $(dir $@)
	perl $(EMU_DIR)/emu_rewrite.pl $< > $@.tmp && mv -f $@.tmp $@

$(EMU)/gen/%.o: $(EMU)/gen/%.cpp $(EMU_HDRS) $(wildcard src/cuda/*.h src/cuda/*.cuh)
	g++ $(EMU_CXXFLAGS) -include emu_device.h -c -o $@ $<

$(EMU)/%.o: $(EMU_DIR)/%.cpp $(EMU_HDRS)
	@mkdir -p $(dir $@)
	g++ $(EMU_CXXFLAGS) -c -o $@ $<

-include $(OBJS:.o=.d) $(CUDA_OBJS:.o=.d) $(EMU_OBJS:.o=.d) $(EMU)/gen/emu_selftest.d

deps:
	@bash scripts/install-deps.sh

demo: deps
	@$(MAKE) --no-print-directory all
	./dplhost examples/fashion_mnist.lua

# (SAN=1: the fuzz harness sets no `ulimit -v`, under which ASan cannot map its shadow memory)
test: deps
	@$(MAKE) --no-print-directory all
	@$(if $(filter 1,$(SAN)),SAN_NO_ULIMIT=1 )bash scripts/run-tests.sh

bench:
	@bash scripts/install-deps.sh --bench
	@$(MAKE) --no-print-directory all
	@bash bench/run.sh

# installs the binary as built (a SAN=1 build stays a SAN build)
install:
	@[ -x dplhost ] || $(MAKE) --no-print-directory all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/dplhost/lua $(DESTDIR)$(PREFIX)/include
	install -m 755 dplhost $(DESTDIR)$(PREFIX)/bin/dplhost
	cp -R lua/dpl $(DESTDIR)$(PREFIX)/share/dplhost/lua/
	cp -R docs $(DESTDIR)$(PREFIX)/share/dplhost/ # (help() points into them)
	install -m 644 include/dpl.h $(DESTDIR)$(PREFIX)/include/dpl.h
	@if [ -f dpl_cuda.so ]; then install -d $(DESTDIR)$(PREFIX)/lib/dplhost && \
	  install -m 755 dpl_cuda.so $(DESTDIR)$(PREFIX)/lib/dplhost/dpl_cuda.so && \
	  echo "install: CUDA plugin in $(PREFIX)/lib/dplhost/dpl_cuda.so"; fi

clean:
	rm -rf build dplhost dpl_cuda.so
