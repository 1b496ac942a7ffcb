"""placeholder"""
def register(kind: str = "wgpu") -> bool:
    return False
