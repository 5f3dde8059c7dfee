"""The lab's emulated tools: one module per tool family (nvidia_smi, dmesg, modules, ...).

Each tool is a `Handler(ctx, argv) -> ToolReply` over the node's state; the bash shims on the
node's PATH forward argv to the server, which dispatches through `table.tool_table()`.
"""
