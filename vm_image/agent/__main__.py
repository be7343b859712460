import sys

from vm_image.agent.agent import main

sys.exit(main())
