"""The public names of TensorFlow 2.21's ``tf.compat.v1`` and of its ``nn``, ``train``,
``errors``, ``io`` and ``math`` modules (generated from ``dir()`` of each): what
:mod:`runtime.compat.v1` tells apart, for a name it lacks, from a name TensorFlow lacks too.
Regenerate with an installed TensorFlow: ``python -m runtime.compat.tf_v1_names``.
"""

import textwrap
from pathlib import Path

MODULES = ("", "nn", "train", "errors", "io", "math")

# Generated with TensorFlow 2.21.0; one string per module, names separated by spaces.
TF_V1_NAMES = {
    "": frozenset("""
        AUTO_REUSE AggregationMethod Assert AttrValue COMPILER_VERSION CXX11_ABI_FLAG
        CXX_VERSION ConditionalAccumulator ConditionalAccumulatorBase ConfigProto
        CriticalSection DType DeviceSpec Dimension Event FIFOQueue FixedLenFeature
        FixedLenSequenceFeature FixedLengthRecordReader GIT_VERSION GPUOptions
        GRAPH_DEF_VERSION GRAPH_DEF_VERSION_MIN_CONSUMER GRAPH_DEF_VERSION_MIN_PRODUCER
        GradientTape Graph GraphDef GraphKeys GraphOptions HistogramProto IdentityReader
        IndexedSlices IndexedSlicesSpec InteractiveSession LMDBReader LogMessage
        MONOLITHIC_BUILD MetaGraphDef Module NameAttrList NoGradient NodeDef NoneTensorSpec
        NotDifferentiable OpError Operation OptimizerOptions OptionalSpec PaddingFIFOQueue
        Print PriorityQueue QUANTIZED_DTYPES QueueBase RaggedTensor RaggedTensorSpec
        RandomShuffleQueue ReaderBase RegisterGradient RunMetadata RunOptions Session
        SessionLog SparseConditionalAccumulator SparseFeature SparseTensor SparseTensorSpec
        SparseTensorValue Summary SummaryMetadata TFRecordReader Tensor TensorArray
        TensorArraySpec TensorInfo TensorShape TensorSpec TextLineReader TypeSpec
        UnconnectedGradients VERSION VarLenFeature Variable VariableAggregation
        VariableScope VariableSynchronization WholeFileReader abs accumulate_n acos acosh
        add add_check_numerics_ops add_n add_to_collection add_to_collections all_variables
        angle app approx_top_k arg_max arg_min argmax argmin argsort as_dtype as_string asin
        asinh assert_equal assert_greater assert_greater_equal assert_integer assert_less
        assert_less_equal assert_near assert_negative assert_non_negative
        assert_non_positive assert_none_equal assert_positive assert_proper_iterable
        assert_rank assert_rank_at_least assert_rank_in assert_same_float_dtype
        assert_scalar assert_type assert_variables_initialized assign assign_add assign_sub
        atan atan2 atanh audio autograph batch_gather batch_scatter_update batch_to_space
        batch_to_space_nd betainc bfloat16 bincount bitcast bitwise bool boolean_mask
        broadcast_dynamic_shape broadcast_static_shape broadcast_to case cast ceil
        check_numerics check_pinned cholesky cholesky_solve clip_by_average_norm
        clip_by_global_norm clip_by_norm clip_by_value colocate_with compat complex
        complex128 complex64 concat cond config confusion_matrix conj constant
        constant_initializer container control_dependencies control_flow_v2_enabled conv
        conv2d_backprop_filter_v2 conv2d_backprop_input_v2 convert_to_tensor
        convert_to_tensor_or_indexed_slices convert_to_tensor_or_sparse_tensor cos cosh
        count_nonzero count_up_to create_partitioned_variables cross cumprod cumsum
        custom_gradient data debugging decode_base64 decode_compressed decode_csv
        decode_json_example decode_raw delete_session_tensor depth_to_space dequantize
        deserialize_many_sparse device diag diag_part digamma dimension_at_index
        dimension_value disable_control_flow_v2 disable_eager_execution
        disable_resource_variables disable_tensor_equality disable_v2_behavior
        disable_v2_tensorshape distribute distributions div div_no_nan divide double dtypes
        dynamic_partition dynamic_stitch edit_distance einsum enable_control_flow_v2
        enable_eager_execution enable_resource_variables enable_tensor_equality
        enable_v2_behavior enable_v2_tensorshape encode_base64 ensure_shape equal erf erfc
        errors executing_eagerly executing_eagerly_outside_functions exp expand_dims
        experimental expm1 extract_image_patches extract_volume_patches eye
        fake_quant_with_min_max_args fake_quant_with_min_max_args_gradient
        fake_quant_with_min_max_vars fake_quant_with_min_max_vars_gradient
        fake_quant_with_min_max_vars_per_channel
        fake_quant_with_min_max_vars_per_channel_gradient feature_column fft fft2d fft3d
        fftnd fill fingerprint fixed_size_partitioner flags float16 float32 float64 floor
        floor_div floordiv floormod foldl foldr function gather gather_nd get_collection
        get_collection_ref get_default_graph get_default_session get_local_variable
        get_logger get_seed get_session_handle get_session_tensor get_static_value
        get_variable get_variable_scope gfile global_norm global_variables
        global_variables_initializer glorot_normal_initializer glorot_uniform_initializer
        grad_pass_through gradients graph_util greater greater_equal group guarantee_const
        half hessians histogram_fixed_width histogram_fixed_width_bins identity identity_n
        ifft ifft2d ifft3d ifftnd igamma igammac imag image import_graph_def init_scope
        initialize_all_tables initialize_all_variables initialize_local_variables
        initialize_variables initializers int16 int32 int64 int8 invert_permutation io
        irfftnd is_finite is_inf is_nan is_non_decreasing is_numeric_tensor
        is_strictly_increasing is_symbolic_tensor is_tensor is_variable_initialized keras
        layers lbeta less less_equal lgamma lin_space linalg linspace lite
        load_file_system_library load_library load_op_library local_variables
        local_variables_initializer log log1p log_sigmoid logging logical_and logical_not
        logical_or logical_xor lookup losses make_ndarray make_template make_tensor_proto
        manip map_fn matching_files math matmul matrix_band_part matrix_determinant
        matrix_diag matrix_diag_part matrix_inverse matrix_set_diag matrix_solve
        matrix_solve_ls matrix_square_root matrix_transpose matrix_triangular_solve maximum
        meshgrid metrics min_max_variable_partitioner minimum mixed_precision mlir mod
        model_variables moving_average_variables multinomial multiply name_scope negative
        nest newaxis nn no_gradient no_op no_regularizer nondifferentiable_batch_function
        norm not_equal numpy_function one_hot ones ones_initializer ones_like op_scope
        orthogonal_initializer pad parallel_stack parse_example parse_single_example
        parse_single_sequence_example parse_tensor placeholder placeholder_with_default
        polygamma pow print profiler py_func py_function python_io qint16 qint32 qint8 qr
        quantization quantize quantize_v2 quantized_concat queue quint16 quint8 ragged
        ragged_fill_empty_rows ragged_fill_empty_rows_grad random random_crop random_gamma
        random_index_shuffle random_normal random_normal_initializer random_poisson
        random_shuffle random_uniform random_uniform_initializer range rank raw_ops
        read_file real realdiv reciprocal recompute_grad reduce_all reduce_any reduce_join
        reduce_logsumexp reduce_max reduce_mean reduce_min reduce_prod reduce_sum
        regex_replace register_tensor_conversion_function repeat
        report_uninitialized_variables required_space_to_batch_paddings reset_default_graph
        reshape resource resource_loader resource_variables_enabled reverse reverse_sequence
        reverse_v2 rfftnd rint roll round rsqrt saturate_cast saved_model scalar_mul scan
        scatter_add scatter_div scatter_max scatter_min scatter_mul scatter_nd
        scatter_nd_add scatter_nd_sub scatter_nd_update scatter_sub scatter_update
        searchsorted segment_max segment_mean segment_min segment_prod segment_sum
        self_adjoint_eig self_adjoint_eigvals sequence_mask serialize_many_sparse
        serialize_sparse serialize_tensor set_random_seed setdiff1d sets shape shape_n
        sigmoid sign signal sin sinh size slice sort space_to_batch space_to_batch_nd
        space_to_depth sparse sparse_add sparse_concat sparse_fill_empty_rows sparse_mask
        sparse_matmul sparse_maximum sparse_merge sparse_minimum sparse_placeholder
        sparse_reduce_max sparse_reduce_max_sparse sparse_reduce_sum
        sparse_reduce_sum_sparse sparse_reorder sparse_reset_shape sparse_reshape
        sparse_retain sparse_segment_mean sparse_segment_sqrt_n sparse_segment_sum
        sparse_slice sparse_softmax sparse_split sparse_tensor_dense_matmul
        sparse_tensor_to_dense sparse_to_dense sparse_to_indicator sparse_transpose spectral
        split sqrt square squared_difference squeeze stack stop_gradient strided_slice
        string string_join string_split string_strip string_to_hash_bucket
        string_to_hash_bucket_fast string_to_hash_bucket_strong string_to_number strings
        substr subtract summary svd switch_case sysconfig tables_initializer tan tanh
        tensor_scatter_add tensor_scatter_nd_add tensor_scatter_nd_max tensor_scatter_nd_min
        tensor_scatter_nd_sub tensor_scatter_nd_update tensor_scatter_sub
        tensor_scatter_update tensordot test tile timestamp to_bfloat16 to_complex128
        to_complex64 to_double to_float to_int32 to_int64 tpu trace train
        trainable_variables transpose truediv truncated_normal truncated_normal_initializer
        truncatediv truncatemod tuple type_spec_from_value types uint16 uint32 uint64 uint8
        uniform_unit_scaling_initializer unique unique_with_counts unravel_index
        unsorted_segment_max unsorted_segment_mean unsorted_segment_min
        unsorted_segment_prod unsorted_segment_sqrt_n unsorted_segment_sum unstack user_ops
        variable_axis_size_partitioner variable_creator_scope variable_op_scope
        variable_scope variables_initializer variance_scaling_initializer variant
        vectorized_map verify_tensor_all_finite version where where_v2 while_loop
        wrap_function write_file xla zeros zeros_initializer zeros_like zeta
    """.split()),
    "nn": frozenset("""
        all_candidate_sampler approx_max_k approx_min_k atrous_conv2d
        atrous_conv2d_transpose avg_pool avg_pool1d avg_pool2d avg_pool3d avg_pool_v2
        batch_norm_with_global_normalization batch_normalization bias_add
        bidirectional_dynamic_rnn collapse_repeated compute_accidental_hits
        compute_average_loss conv1d conv1d_transpose conv2d conv2d_backprop_filter
        conv2d_backprop_input conv2d_transpose conv3d conv3d_backprop_filter
        conv3d_backprop_filter_v2 conv3d_transpose conv_transpose convolution crelu
        ctc_beam_search_decoder ctc_beam_search_decoder_v2 ctc_greedy_decoder ctc_loss
        ctc_loss_v2 ctc_unique_labels depth_to_space depthwise_conv2d
        depthwise_conv2d_backprop_filter depthwise_conv2d_backprop_input
        depthwise_conv2d_native depthwise_conv2d_native_backprop_filter
        depthwise_conv2d_native_backprop_input dilation2d dropout dynamic_rnn elu
        embedding_lookup embedding_lookup_sparse erosion2d experimental
        fixed_unigram_candidate_sampler fractional_avg_pool fractional_max_pool
        fused_batch_norm in_top_k l2_loss l2_normalize leaky_relu
        learned_unigram_candidate_sampler local_response_normalization log_poisson_loss
        log_softmax log_uniform_candidate_sampler lrn max_pool max_pool1d max_pool2d
        max_pool3d max_pool_v2 max_pool_with_argmax moments nce_loss normalize_moments pool
        quantized_avg_pool quantized_conv2d quantized_max_pool quantized_relu_x raw_rnn relu
        relu6 relu_layer rnn_cell safe_embedding_lookup_sparse sampled_softmax_loss
        scale_regularization_loss selu separable_conv2d sigmoid
        sigmoid_cross_entropy_with_logits silu softmax softmax_cross_entropy_with_logits
        softmax_cross_entropy_with_logits_v2 softplus softsign space_to_batch space_to_depth
        sparse_softmax_cross_entropy_with_logits static_bidirectional_rnn static_rnn
        static_state_saving_rnn sufficient_statistics swish tanh top_k
        uniform_candidate_sampler weighted_cross_entropy_with_logits weighted_moments
        with_space_to_batch xw_plus_b zero_fraction
    """.split()),
    "train": frozenset("""
        AdadeltaOptimizer AdagradDAOptimizer AdagradOptimizer AdamOptimizer BytesList
        Checkpoint CheckpointManager CheckpointOptions CheckpointSaverHook
        CheckpointSaverListener ChiefSessionCreator ClusterDef ClusterSpec Coordinator
        Example ExponentialMovingAverage Feature FeatureList FeatureLists Features
        FeedFnHook FinalOpsHook FloatList FtrlOptimizer GlobalStepWaiterHook
        GradientDescentOptimizer Int64List JobDef LoggingTensorHook LooperThread
        MomentumOptimizer MonitoredSession MonitoredTrainingSession
        NanLossDuringTrainingError NanTensorHook NewCheckpointReader Optimizer ProfilerHook
        ProximalAdagradOptimizer ProximalGradientDescentOptimizer QueueRunner
        RMSPropOptimizer Saver SaverDef Scaffold SecondOrStepTimer SequenceExample Server
        ServerDef SessionCreator SessionManager SessionRunArgs SessionRunContext
        SessionRunHook SessionRunValues SingularMonitoredSession StepCounterHook
        StopAtStepHook SummarySaverHook Supervisor SyncReplicasOptimizer VocabInfo
        WorkerSessionCreator add_queue_runner assert_global_step basic_train_loop batch
        batch_join checkpoint_exists checkpoints_iterator cosine_decay cosine_decay_restarts
        create_global_step do_quantize_training_on_graphdef experimental exponential_decay
        export_meta_graph generate_checkpoint_state_proto get_checkpoint_mtimes
        get_checkpoint_state get_global_step get_or_create_global_step global_step
        import_meta_graph init_from_checkpoint input_producer inverse_time_decay
        latest_checkpoint limit_epochs linear_cosine_decay list_variables load_checkpoint
        load_variable match_filenames_once maybe_batch maybe_batch_join maybe_shuffle_batch
        maybe_shuffle_batch_join natural_exp_decay noisy_linear_cosine_decay
        piecewise_constant piecewise_constant_decay polynomial_decay queue_runner
        range_input_producer remove_checkpoint replica_device_setter sdca_fprint
        sdca_optimizer sdca_shrink_l1 shuffle_batch shuffle_batch_join slice_input_producer
        start_queue_runners string_input_producer summary_iterator update_checkpoint_state
        warm_start write_graph
    """.split()),
    "errors": frozenset("""
        ABORTED ALREADY_EXISTS AbortedError AlreadyExistsError CANCELLED CancelledError
        DATA_LOSS DEADLINE_EXCEEDED DataLossError DeadlineExceededError FAILED_PRECONDITION
        FailedPreconditionError INTERNAL INVALID_ARGUMENT InternalError InvalidArgumentError
        NOT_FOUND NotFoundError OK OUT_OF_RANGE OpError OutOfRangeError PERMISSION_DENIED
        PermissionDeniedError RESOURCE_EXHAUSTED ResourceExhaustedError UNAUTHENTICATED
        UNAVAILABLE UNIMPLEMENTED UNKNOWN UnauthenticatedError UnavailableError
        UnimplementedError UnknownError error_code_from_exception_type
        exception_type_from_error_code raise_exception_on_not_ok_status
    """.split()),
    "io": frozenset("""
        FixedLenFeature FixedLenSequenceFeature PaddingFIFOQueue PriorityQueue QueueBase
        RaggedFeature RandomShuffleQueue SparseFeature TFRecordCompressionType
        TFRecordOptions TFRecordWriter VarLenFeature decode_and_crop_jpeg decode_base64
        decode_bmp decode_compressed decode_csv decode_gif decode_image decode_jpeg
        decode_json_example decode_jxl decode_png decode_proto decode_raw decode_webp
        deserialize_many_sparse encode_base64 encode_jpeg encode_png encode_proto
        extract_jpeg_shape gfile is_jpeg match_filenames_once matching_files parse_example
        parse_sequence_example parse_single_example parse_single_sequence_example
        parse_tensor read_file serialize_many_sparse serialize_sparse serialize_tensor
        tf_record_iterator write_file write_graph
    """.split()),
    "math": frozenset("""
        abs accumulate_n acos acosh add add_n angle approx_max_k approx_min_k argmax argmin
        asin asinh atan atan2 atanh bessel_i0 bessel_i0e bessel_i1 bessel_i1e betainc
        bincount ceil confusion_matrix conj cos cosh count_nonzero cumprod cumsum
        cumulative_logsumexp digamma divide divide_no_nan equal erf erfc erfcinv erfinv exp
        expm1 floor floordiv floormod greater greater_equal igamma igammac imag in_top_k
        invert_permutation is_finite is_inf is_nan is_non_decreasing is_strictly_increasing
        l2_normalize lbeta less less_equal lgamma log log1p log_sigmoid log_softmax
        logical_and logical_not logical_or logical_xor maximum minimum mod multiply
        multiply_no_nan ndtri negative nextafter not_equal polygamma polyval pow real
        reciprocal reciprocal_no_nan reduce_all reduce_any reduce_euclidean_norm
        reduce_logsumexp reduce_max reduce_mean reduce_min reduce_prod reduce_std reduce_sum
        reduce_variance rint round rsqrt scalar_mul segment_max segment_mean segment_min
        segment_prod segment_sum sigmoid sign sin sinh sobol_sample softmax softplus
        softsign special sqrt square squared_difference subtract tan tanh top_k truediv
        unsorted_segment_max unsorted_segment_mean unsorted_segment_min
        unsorted_segment_prod unsorted_segment_sqrt_n unsorted_segment_sum xdivy xlog1py
        xlogy zero_fraction zeta
    """.split()),
}


def generate(path: Path = Path(__file__)) -> Path:
    """Rewrite this file's ``TF_V1_NAMES`` from the installed TensorFlow's modules."""
    import tensorflow as tf
    v1 = tf.compat.v1
    text = path.read_text()
    head = text[:text.index("# Generated with TensorFlow")]
    tail = text[text.index("\n\n\ndef generate("):]
    lines = [f"# Generated with TensorFlow {tf.__version__}; one string per module, names "
             "separated by spaces.", "TF_V1_NAMES = {"]
    for group in MODULES:
        module = getattr(v1, group) if group else v1
        names = " ".join(sorted(n for n in dir(module) if not n.startswith("_")))
        lines += [f'    "{group}": frozenset("""']
        lines += ["        " + line for line in textwrap.wrap(names, 84)]
        lines += ['    """.split()),']
    path.write_text(head + "\n".join(lines + ["}"]) + tail)
    return path


if __name__ == "__main__":
    print(generate())
